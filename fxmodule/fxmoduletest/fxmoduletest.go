package fxmoduletest

import (
	"testing"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/topology"
)

// Consumer returns an mqtest consumer that runs c's handler through
// exactly the chain the module runs it with, given the app's topology t
// and the middleware the app gives fxmodule.WithMiddleware (shared, in
// order): middleware.Standard with t's policy when c.Standard is set,
// c.StandardOptions and c.Options. A consumer the module would refuse
// (Standard with no policy in t, a policy that disagrees with t's) fails
// the test with the module's error. So does a c with Inbox set: the
// inbox is the app's (outbox.Module's) and needs a database, so such a
// test sets Inbox false and gives an inbox of its own, innermost, as the
// last of c.Options (mq.WithMiddleware), rather than run the handler
// without one unawares.
func Consumer(tb testing.TB, c fxmodule.Consumer, t *topology.Topology, shared ...mq.Middleware) *mqtest.Consumer {
	tb.Helper()
	opts, err := fxmodule.ConsumerOptions(c, t, shared...)
	if err != nil {
		tb.Fatal(err)
	}
	return mqtest.New(tb, c.Queue, c.Handler, opts...)
}

// Publisher returns the fake of the publisher fxmodule.AsPublisher(exchange,
// opts...) provides in an app whose topology is t: it routes through t and
// is mandatory or not as the module's would be (fxmodule.PublisherOptions),
// so a publish that would come back unroutable from the broker fails the
// same way in the test.
func Publisher(t *topology.Topology, exchange string, opts ...mq.PublisherOption) *mqtest.Publisher {
	return &mqtest.Publisher{Topology: t, Exchange: exchange, Options: fxmodule.PublisherOptions(t, exchange, opts...)}
}
