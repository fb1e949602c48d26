package ops

import (
	"context"
	"time"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// RungCount is what Rungs found for one rung of a queue.
type RungCount struct {
	// Queue is the rung's name; Wait the wait it holds messages for.
	Queue string
	Wait  time.Duration
	// Durable is set for a durable rung (a quorum queue that dead-letters
	// at least once), clear for a classic one.
	Durable bool
	// Ready is the number of messages waiting in the rung; Consumers the
	// consumers subscribed to it (a rung normally has none).
	Ready, Consumers int
}

// Rungs lists the rungs of queue, of both kinds, that exist for the
// given waits (the policy's broker waits: retry.Policy.BrokerRungs), with
// the messages waiting in each: the classic rungs first, then the durable
// ones, each in the order of waits. A queue moving from classic rungs to
// durable ones has both sets; once the classic set is empty its rungs can
// be deleted (the library never deletes a rung; see RungsRetirable).
func Rungs(ctx context.Context, b *mq.Broker, queue string, waits ...time.Duration) ([]RungCount, error) {
	var names []string
	for _, durable := range []bool{false, true} {
		for _, w := range waits {
			if durable {
				names = append(names, topology.DurableRungQueue(queue, w))
			} else {
				names = append(names, topology.RungQueue(queue, w))
			}
		}
	}
	counts, err := Count(ctx, b, names...)
	out := make([]RungCount, 0, len(counts))
	for _, c := range counts {
		if !c.Exists {
			continue
		}
		_, w, durable, _ := topology.ParseRung(c.Queue)
		out = append(out, RungCount{Queue: c.Queue, Wait: w, Durable: durable, Ready: c.Ready, Consumers: c.Consumers})
	}
	return out, err
}

// RungsRetirable reports whether the classic rungs among rs can be
// deleted: there is at least one, every one is empty and has no consumer,
// and durable rungs have taken their place.
func RungsRetirable(rs []RungCount) bool {
	classic, durable := 0, 0
	for _, r := range rs {
		if r.Durable {
			durable++
			continue
		}
		if r.Ready != 0 || r.Consumers != 0 {
			return false
		}
		classic++
	}
	return classic > 0 && durable > 0
}
