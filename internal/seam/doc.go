// Package seam is the bridge between package mq and the packages of this
// module that need what mq does not export: mqtest builds deliveries whose
// hops, log, events and waits it records, and fxmodule and mqtest build a
// consumer's middleware chain exactly as Broker.Consume does.
//
// What it owns: a registry of functions keyed by their type, which mq fills
// in its init (a Delivery constructor and two chain builders), and the
// Delivery of test choices the constructor takes. A Delivery itself holds
// no test state: mq hands it a stand-in for the consumer's session that
// does what those choices say. It
// must not import mq (mq imports it) and must hold no logic of its own: every
// function in it is mq's.
package seam
