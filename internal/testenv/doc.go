// Package testenv is the integration tests' shared footing: the broker URL
// (AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/), unique goit.*
// names that are deleted when the test ends, and a broker started for the
// test and closed after it.
//
// It must not be imported by non-test code. A broker that does not answer
// is a test failure here, never a skip: `make test` starts one first.
package testenv
