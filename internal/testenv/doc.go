// Package testenv is the integration tests' shared footing, for every
// suite and build tag (integration, chaos, cluster, tls):
//
//   - the broker URL (AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/),
//     unique goit.* names that are deleted when the test ends, and a broker
//     started for the test and closed after it (URL, Name, Cleanup, Broker);
//   - queues and what is in them: Queue (with the queues a consumer derives
//     from it, CleanupDerived), CleanupExchanges, Publish, Count,
//     WaitCount, GetAll, and Stop for a consumer;
//   - faults and checks: Proxy (a TCP proxy in front of the broker, to cut
//     or refuse connections), ClosedAddr, Rabbitmqctl (the command line from
//     RABBITMQCTL, default `rabbitmqctl`: every rabbitmqctl call of the
//     tests goes through it; as root it runs the CLI itself, not Debian's
//     su wrapper, in a process group killed whole when the call runs out
//     of time), KillCLIs (the CLI VMs a cut-off call left behind),
//     Eventually, Poll and Wait, NoLeaks (goroutines back to baseline when
//     the test ends), CPU;
//   - the broker's version (BrokerVersion, from the connection's server
//     properties), for the tests whose assertions differ by version;
//   - logs: Logger and Discard, and LogRecorder, a slog.Handler that keeps
//     every record for assertions on the library's events.
//
// It must not be imported by non-test code. A broker that does not answer
// is a test failure here, never a skip: `make test` starts one first.
package testenv
