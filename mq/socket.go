package mq

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errStalled: the socket under a connection took no byte for a whole stall
// interval while the broker had not said it blocks publishing.
var errStalled = errors.New("mq: the connection's socket stopped draining")

// socket is the TCP connection under one AMQP connection, owned by the
// library so that nothing written to it can hang for good: a write that
// moves no byte for stall (while the broker has not sent
// connection.blocked, which legitimately stops it reading) closes the
// socket, which ends the connection, wakes every call waiting on it and
// lets the supervisor redial. amqp091-go cannot do this itself: its
// connection shutdown waits for the channel lock a blocked publish holds,
// so it would never reach closing the socket.
type socket struct {
	net.Conn
	stall   time.Duration
	blocked atomic.Bool // the broker said it blocks publishing on this connection

	mu       sync.Mutex
	deadline time.Time // the write deadline this socket set; zero when none is set
	closed   atomic.Bool
}

func newSocket(c net.Conn, stall time.Duration) *socket {
	return &socket{Conn: c, stall: stall}
}

// Write writes b, re-arming the write deadline as bytes move.
func (s *socket) Write(b []byte) (int, error) {
	total := 0
	for {
		s.arm()
		n, err := s.Conn.Write(b[total:])
		total += n
		if err == nil {
			return total, nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || s.closed.Load() {
			return total, err
		}
		if n > 0 || s.blocked.Load() {
			s.expire()
			continue // slow, or held by the broker on purpose: not dead
		}
		_ = s.Close()
		return total, fmt.Errorf("%w: no byte written for %v", errStalled, s.stall)
	}
}

// arm moves the write deadline to stall from now when less than three
// quarters of it is left: one clock read per write, a deadline update only
// every stall/4.
func (s *socket) arm() {
	now := time.Now()
	s.mu.Lock()
	if s.deadline.IsZero() || s.deadline.Sub(now) < s.stall*3/4 {
		s.deadline = now.Add(s.stall)
		_ = s.Conn.SetWriteDeadline(s.deadline)
	}
	s.mu.Unlock()
}

func (s *socket) expire() {
	s.mu.Lock()
	s.deadline = time.Time{}
	s.mu.Unlock()
}

// SetDeadline passes through (amqp091-go bounds its handshake with it and
// clears it after), forgetting the write deadline this socket had set.
func (s *socket) SetDeadline(t time.Time) error {
	s.expire()
	return s.Conn.SetDeadline(t)
}

// SetWriteDeadline passes through, like SetDeadline.
func (s *socket) SetWriteDeadline(t time.Time) error {
	s.expire()
	return s.Conn.SetWriteDeadline(t)
}

// Close closes the socket; idempotent.
func (s *socket) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.Conn.Close()
}
