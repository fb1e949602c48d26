package mq_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/mq"
)

// A start that runs out of time names what went wrong before the deadline,
// not the dial the deadline cut short: with one URL that refuses and one
// that accepts and never answers, the error says "connection refused" (on
// a loaded machine the last dial to a refusing port can be the one in
// flight at the deadline, and its error is only the deadline's).
func TestStartDeadlineKeepsTheLastRealError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the listener closes
		}
	}()
	b := mq.New(mq.Config{URLs: []string{
		"amqp://guest:guest@127.0.0.1:1/",
		"amqp://guest:guest@" + ln.Addr().String() + "/",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = b.Start(ctx)
	if err == nil {
		_ = b.Close(context.Background())
		t.Fatal("start succeeded against a refusing and a silent address")
	}
	t.Logf("start: %v", err)
	if msg := err.Error(); !strings.Contains(msg, "before the deadline") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("error %q: want the deadline and the refusal that came before it", msg)
	}
}
