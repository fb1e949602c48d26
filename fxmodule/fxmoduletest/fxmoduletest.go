package fxmoduletest

import (
	"testing"

	"github.com/acemq/acemq-go/fxmodule"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/mqtest"
	"github.com/acemq/acemq-go/topology"
)

// Consumer returns an mqtest consumer that runs c's handler through
// exactly the chain the module runs it with (fxmodule.ConsumerOptions),
// given the app's topology t and the middleware the app gives
// fxmodule.AsMiddleware (shared, in order): middleware.Standard with t's
// policy when c.Standard is set, c.StandardOptions and c.Options. A
// consumer the module would refuse (Standard with no policy in t, a
// policy that disagrees with t's) fails the test with the module's
// error. So does a c with Inbox set: the app runs it in its inbox, which
// needs a database; [ConsumerWithInbox] runs it so.
func Consumer(tb testing.TB, c fxmodule.Consumer, t *topology.Topology, shared ...mq.Middleware) *mqtest.Consumer {
	tb.Helper()
	if c.Inbox {
		tb.Fatalf("fxmoduletest.Consumer: consumer of %q has Inbox set: the app runs it in its inbox, so run it with fxmoduletest.ConsumerWithInbox(t, inbox, …), the inbox outboxtest's db.Inbox() or outbox.Inbox(db, outbox.WithSchema(…))", c.Queue)
	}
	return consumer(tb, nil, c, t, shared)
}

// ConsumerWithInbox is [Consumer] for a c with Inbox set, run as the app
// runs it: inbox in the app's inbox's place, innermost, next to the
// handler (inside Standard's ladder, so each attempt is a transaction of
// its own), where outbox.Module's would be. inbox is the same middleware
// over the test's database: outboxtest's db.Inbox(), or
// outbox.Inbox(db, outbox.WithSchema(tables)) with the tables the app
// gives outbox.Module.
//
//	db := outboxtest.New(t, tables)
//	c := fxmoduletest.ConsumerWithInbox(t, db.Inbox(), billing.Consumer(), Topology())
//
// A c without Inbox set fails the test (the app would run it without the
// inbox: Inbox: true forgotten), as does a nil inbox.
func ConsumerWithInbox(tb testing.TB, inbox mq.Middleware, c fxmodule.Consumer, t *topology.Topology, shared ...mq.Middleware) *mqtest.Consumer {
	tb.Helper()
	switch {
	case inbox == nil:
		tb.Fatalf("fxmoduletest.ConsumerWithInbox: consumer of %q: the inbox is nil", c.Queue)
	case !c.Inbox:
		tb.Fatalf("fxmoduletest.ConsumerWithInbox: consumer of %q: Inbox is not set, so the app runs it without the inbox: set Inbox, or test it with fxmoduletest.Consumer", c.Queue)
	}
	return consumer(tb, inbox, c, t, shared)
}

func consumer(tb testing.TB, inbox mq.Middleware, c fxmodule.Consumer, t *topology.Topology, shared []mq.Middleware) *mqtest.Consumer {
	tb.Helper()
	opts, err := fxmodule.ConsumerOptions(c, t, inbox, shared...)
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
