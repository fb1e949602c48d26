package topology

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
)

// InstanceQueue names a queue after this instance of the service: base, a
// dot, the host name and a random suffix drawn once per process, so every
// instance has its own queue and the name stays the same across
// reconnects. It is how a service makes every instance hear an exchange
// (a broadcast) without inventing unique names:
//
//	q := topology.InstanceQueue("billing.prices")
//	t := topology.New().
//		Exchange("prices", topology.Fanout).
//		Queue(q, topology.Exclusive()).
//		Binding(q, "prices", "")
//
// Declare such a queue [Exclusive] (the broker deletes it with the
// connection, so no instance leaves one behind) and consume it through
// the Broker that declared it: after a reconnect that Broker declares it
// and its bindings again before its consumers resubscribe (mq.Broker.Declare).
// Messages published while it does not exist are not routed to it
// (docs/recovery.md).
func InstanceQueue(base string) string {
	return base + "." + instanceID()
}

var instanceID = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, host)
	if len(host) > 64 {
		host = host[:64]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	if host == "" {
		return hex.EncodeToString(b[:])
	}
	return host + "." + hex.EncodeToString(b[:])
})
