// Package fxmoduletest tests what an fx app built with package fxmodule
// runs, without fx and without a broker: Consumer runs an fxmodule.Consumer
// through exactly the chain the module would run it with (one function,
// fxmodule.ConsumerOptions, builds both), on an mqtest.Consumer, and
// ConsumerWithInbox one with Inbox set, the test's inbox in the app's
// place; Publisher is the fake of a publisher fxmodule.AsPublisher would
// provide, routing through the app's topology with the options the module
// would give it (fxmodule.PublisherOptions).
//
//	events := fxmoduletest.Publisher(Topology(), "orders-events")
//	s := &Shipping{Events: events}
//	c := fxmoduletest.Consumer(t, s.Consumer(), Topology())
//	r := c.Deliver(mq.Message{Body: []byte(`{"id":"o-1"}`)})
//
// What it owns: the two bridges only; every decision is fxmodule's (the
// options) and mqtest's (the fakes). It lives apart from fxmodule so that
// an app's binary does not link package testing.
package fxmoduletest
