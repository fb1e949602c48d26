package mq

import (
	"strings"
	"time"
)

// stableAfter (5 s) is how long a connection or a subscription must stay up to
// count as healthy: one that ends sooner counts as a failed attempt, so the
// backoff keeps growing across such flaps instead of starting again at
// [Config.ReconnectMin]; one that stayed up this long resets it.
const stableAfter = 5 * time.Second

// flapAlarm is how many flaps in a row make EventConnectionFlapping (or
// EventConsumerPoison), each of them an end within flapSoon of coming up.
const flapAlarm = 3

// flapSoon is how soon after coming up a connection or subscription must
// end to count toward flapAlarm: one that keeps dying right after it opens
// (an endpoint that drops every connection after the handshake, a poison
// message at the head of the queue), not one that worked for a while and
// was cut (a failover, a chaos test's cuts a second or two apart).
const flapSoon = time.Second

// flapGuard counts the flaps of one connection or consumer session.
type flapGuard struct {
	upAt   time.Time
	flaps  int // in a row: ends within stableAfter of coming up (the backoff)
	soon   int // in a row: ends within flapSoon of coming up (the alarm)
	warned bool
}

// up records that it came up.
func (g *flapGuard) up(now time.Time) { g.upAt = now }

// down records that it ended and returns the flaps in a row so far (0: it
// had been up for stableAfter, which resets the count).
func (g *flapGuard) down(now time.Time) int {
	lived := now.Sub(g.upAt)
	if lived >= stableAfter {
		g.flaps, g.soon, g.warned = 0, 0, false
		return 0
	}
	g.flaps++
	if lived < flapSoon {
		g.soon++
	} else {
		g.soon, g.warned = 0, false
	}
	return g.flaps
}

// alarm reports, once per streak, that flapAlarm ends in a row came within
// flapSoon of coming up.
func (g *flapGuard) alarm() bool {
	if g.soon >= flapAlarm && !g.warned {
		g.warned = true
		return true
	}
	return false
}

// flapWait is how long to wait before the first redial after a flap: the
// backoff of the flaps so far (none after a connection that was stable).
func (b *Broker) flapWait(flaps int) time.Duration {
	if flaps == 0 {
		return 0
	}
	return b.backoff(flaps - 1)
}

// frameError reports whether a connection ended because its client could
// not read a frame (amqp091-go reports 501 FRAME_ERROR or 502
// SYNTAX_ERROR and closes the connection).
//
// amqp091-go reports a socket that closed or broke under it as 501 too
// ("EOF", a reset, a broken pipe, the socket's own errStalled): that is a
// lost connection, not a frame it could not decode, and is no sign of a
// poison message.
func frameError(why string) bool {
	if !strings.Contains(why, "Exception (501)") && !strings.Contains(why, "Exception (502)") {
		return false
	}
	for _, lost := range []string{`"EOF"`, "connection reset", "broken pipe", "use of closed network connection", "i/o timeout", errStalled.Error()} {
		if strings.Contains(why, lost) {
			return false
		}
	}
	return true
}

type errorString string

func (e errorString) Error() string { return string(e) }
