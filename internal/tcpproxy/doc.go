// Package tcpproxy is a loopback TCP proxy for fault tests: put it between
// a client and the broker, and the faults it makes hit only the test's own
// connections, never a shared broker. It cuts every connection (Cut),
// refuses new ones (Refuse), drops each right after its AMQP handshake
// (FlapAfterHandshake), holds bytes in either direction (Stall), stops
// reading from clients (StopReading), and slips connection.blocked and
// unblocked frames in (SendBlocked, SendUnblocked, BlockAfterHandshake). It
// follows the AMQP frames only as far as that needs, and counts what it
// sees: connections (Accepted, Opened) and the methods clients send (Sent,
// LastSent). A side that resets its connection has the other side's
// reset too, as a direct connection would end.
//
// It must not be imported by non-test code.
package tcpproxy
