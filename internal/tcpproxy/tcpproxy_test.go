package tcpproxy

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// A client that resets its connection has the proxy reset the broker's
// side too, as a direct connection would: closed with a FIN instead, the
// proxy's kernel would still deliver what it held for the broker when a
// cut between them healed (field seed 1063112964), which the client had
// thrown away. A client that closes with a FIN ends the broker's side
// with one.
func TestProxyPassesAResetOn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reset     bool
		wantReset bool
	}{{"reset", true, true}, {"fin", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			p, err := Start(ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			up, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			// Past the 8-byte protocol header the proxy reads frames; a
			// heartbeat frame is the smallest.
			msg := append([]byte("AMQP\x00\x00\x09\x01"), 8, 0, 0, 0, 0, 0, 0, 0xce)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			_ = up.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(up, got); err != nil {
				t.Fatalf("the broker's side read %q: %v", got, err)
			}
			if tc.reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			_ = c.Close()
			_, err = up.Read(got)
			switch {
			case tc.wantReset && !errors.Is(err, syscall.ECONNRESET):
				t.Errorf("the client reset its connection; the broker's side read %v, want a reset", err)
			case !tc.wantReset && !errors.Is(err, io.EOF):
				t.Errorf("the client closed its connection; the broker's side read %v, want EOF", err)
			}
		})
	}
}
