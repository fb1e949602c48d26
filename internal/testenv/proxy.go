package testenv

import (
	"net"
	"net/url"
	"testing"

	"github.com/acemq/acemq-go/internal/tcpproxy"
)

// Proxy starts a TCP proxy in front of the test broker (URL()) and returns
// it with the AMQP URL that goes through it. It is closed when the test
// ends (closing it earlier as well is fine).
func Proxy(t testing.TB) (*tcpproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5672")
	}
	p, err := tcpproxy.Start(host)
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	return p, u.String()
}

// ClosedAddr returns a loopback host:port nothing listens on.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
