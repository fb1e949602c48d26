package mq

import (
	"testing"
	"time"
)

func TestFlapGuard(t *testing.T) {
	now := time.Now()
	g := flapGuard{upAt: now}
	for i := 1; i <= 5; i++ {
		if n := g.down(now.Add(200 * time.Millisecond)); n != i {
			t.Fatalf("flap %d counted as %d", i, n)
		}
		if got, want := g.alarm(), i == flapAlarm; got != want {
			t.Errorf("alarm after %d flaps: %v", i, got)
		}
		g.up(now)
	}
	if n := g.down(now.Add(stableAfter)); n != 0 || g.flaps != 0 {
		t.Errorf("a stable period did not reset the count: %d", n)
	}
	g.up(now)
	for range flapAlarm {
		g.down(now)
	}
	if !g.alarm() {
		t.Error("no alarm for a new streak")
	}
	if !frameError(`Exception (501) Reason: "frame could not be parsed"`) || frameError("Exception (320) Reason: \"CONNECTION_FORCED\"") {
		t.Error("frameError")
	}
	// A cut connection is reported as 501 too: not a poison frame (the
	// connection-cut chaos scenario logged acemq.consumer.poison for cuts).
	for _, lost := range []string{`Exception (501) Reason: "EOF"`,
		`Exception (501) Reason: "write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe"`,
		`Exception (501) Reason: "read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"`} {
		if frameError(lost) {
			t.Errorf("frameError(%s) = true for a lost connection", lost)
		}
	}
}

// A read held at the gate ends when the socket under it closes (the
// connection is lost, or Close aborts it, before the listeners are in).

// Cuts of connections that had been up for a while are losses, not flaps
// worth an alarm, even when they come within stableAfter of each other (the
// chaos scenarios cut a working connection every second or two).
func TestFlapAlarmNeedsLossesSoonAfterOpening(t *testing.T) {
	now := time.Now()
	g := flapGuard{upAt: now}
	for i := range 2 * flapAlarm {
		now = now.Add(1500 * time.Millisecond)
		g.down(now)
		if g.alarm() {
			t.Fatalf("alarm after %d losses, each 1.5 s after its connection opened", i+1)
		}
		g.up(now)
	}
	for i := range flapAlarm {
		now = now.Add(10 * time.Millisecond)
		g.down(now)
		if got, want := g.alarm(), i == flapAlarm-1; got != want {
			t.Fatalf("alarm %v after %d losses right after opening", got, i+1)
		}
		g.up(now)
	}
}

// The socket's own stall error comes back from amqp091-go as a 501 too: a
// lost connection, not a frame it could not decode.
func TestFrameErrorIsNotTheSocketsStall(t *testing.T) {
	why := `Exception (501) Reason: "` + errStalled.Error() + `: no byte written for 10s"`
	if frameError(why) {
		t.Fatalf("frameError(%s) = true for a socket that stopped draining", why)
	}
}
