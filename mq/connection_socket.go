package mq

import (
	"encoding/binary"
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

	wmu   sync.Mutex // one write to the TCP connection at a time; guards corks and held
	corks int        // writers that asked to hold writes back (see cork)
	held  []byte     // bytes written while corked, not sent yet
	// broke is why a send of held bytes failed, which closed the socket:
	// the reads and writes that fail after it report it (see said).
	broke atomic.Pointer[error]

	gate *gate // the open gate above it (above TLS on amqps://), released with it

	// closedOK: the last bytes read from the broker were its
	// connection.close-ok, so it read everything sent before the
	// connection.close it answers; set by the gate above (see Close).
	closedOK atomic.Bool
}

func newSocket(c net.Conn, stall time.Duration) *socket {
	return &socket{Conn: c, stall: stall}
}

// gate is what amqp091-go reads from: it stops reads right after
// connection.open-ok until release, so that no frame after the handshake
// (a connection.blocked the broker sends at once) reaches amqp091-go
// before the connection's listeners are registered: amqp091-go drops
// notifications nobody listens for. It sits above TLS, where the frames
// are plain.
type gate struct {
	net.Conn
	passed   bool   // released and nothing held: plain reads
	opened   bool   // open-ok went through; later bytes wait for released
	held     []byte // bytes read past open-ok, served once released
	released chan struct{}
	once     sync.Once
	frame    frameScan

	// After the handshake, the reader follows the end of the stream: tail
	// is its last bytes (only the reader goroutine touches it), closedOK
	// (the socket's, nil in a gate of its own) says whether they are the
	// broker's connection.close-ok.
	tail     [len(closeOKFrame)]byte
	closedOK *atomic.Bool
}

func newGate(c net.Conn) *gate { return &gate{Conn: c, released: make(chan struct{})} }

// closeOKFrame is connection.close-ok as the broker sends it: a method
// frame on channel 0 of 4 bytes (class 10, method 51), then the frame end.
var closeOKFrame = [...]byte{1, 0, 0, 0, 0, 0, 4, 0, 10, 0, 51, 0xCE}

// saw records b, just read, in the gate's tail, and whether the stream
// now ends with connection.close-ok. A broker says nothing after it.
func (g *gate) saw(b []byte) {
	if g.closedOK == nil || len(b) == 0 {
		return
	}
	if len(b) >= len(g.tail) {
		copy(g.tail[:], b[len(b)-len(g.tail):])
	} else {
		copy(g.tail[:], g.tail[len(b):])
		copy(g.tail[len(g.tail)-len(b):], b)
	}
	g.closedOK.Store(g.tail == closeOKFrame)
}

// Read reads, holding back what follows connection.open-ok until release.
// Only amqp091-go's reader goroutine calls it.
func (g *gate) Read(b []byte) (int, error) {
	if g.passed {
		n, err := g.Conn.Read(b)
		g.saw(b[:n])
		return n, err
	}
	if g.opened {
		<-g.released
		if len(g.held) > 0 {
			n := copy(b, g.held)
			g.held = g.held[n:]
			g.saw(b[:n])
			return n, nil
		}
		g.passed = true
		n, err := g.Conn.Read(b)
		g.saw(b[:n])
		return n, err
	}
	n, err := g.Conn.Read(b)
	if end, ok := g.frame.scan(b[:n]); ok {
		g.opened = true
		g.held = append([]byte(nil), b[end:n]...)
		n = end
	}
	return n, err
}

// release lets reads past connection.open-ok through; idempotent.
func (g *gate) release() { g.once.Do(func() { close(g.released) }) }

// Close closes the connection under the gate and opens the gate, so a read
// held there ends.
func (g *gate) Close() error {
	err := g.Conn.Close()
	g.release()
	return err
}

// release opens the socket's gate (see gate).
func (s *socket) release() {
	if s.gate != nil {
		s.gate.release()
	}
}

// frameScan follows the AMQP frames of the broker-to-client stream during
// the handshake.
type frameScan struct {
	hdr       [7]byte
	hn        int
	head      [4]byte
	headN     int
	remaining int // payload and frame-end bytes still to come
}

// scan consumes b and reports the offset just past connection.open-ok
// when that frame ends within b.
func (f *frameScan) scan(b []byte) (int, bool) {
	n := 0
	for n < len(b) {
		if f.hn < len(f.hdr) {
			k := copy(f.hdr[f.hn:], b[n:])
			f.hn += k
			n += k
			if f.hn == len(f.hdr) {
				f.remaining = int(binary.BigEndian.Uint32(f.hdr[3:7])) + 1
				f.headN = 0
			}
			continue
		}
		k := min(f.remaining, len(b)-n)
		if f.headN < len(f.head) {
			f.headN += copy(f.head[f.headN:], b[n:n+k])
		}
		f.remaining -= k
		n += k
		if f.remaining == 0 {
			f.hn = 0
			if f.hdr[0] == 1 && f.hdr[1] == 0 && f.hdr[2] == 0 && f.headN == 4 &&
				binary.BigEndian.Uint16(f.head[0:2]) == 10 && binary.BigEndian.Uint16(f.head[2:4]) == 41 {
				return n, true
			}
		}
	}
	return n, false
}

// corkMax bounds the bytes a corked socket holds back: past it, a write
// goes out at once, so a corked run of large messages does not pile up in
// memory.
const corkMax = 64 << 10

// cork holds back the writes that follow, from any goroutine, until the
// matching uncork, which sends them in one write: a run of publishes
// written back to back then costs one system call rather than one each
// (amqp091-go flushes its buffer after every message). Callers uncork
// promptly: only the time it takes to hand amqp091-go the run of
// messages. Nil-safe.
func (s *socket) cork() {
	if s == nil {
		return
	}
	s.wmu.Lock()
	s.corks++
	s.wmu.Unlock()
}

// uncork ends one cork and sends what is held. A failed send closes the
// socket: amqp091-go took those bytes as written, so the connection
// cannot go on, and closing it ends it (every publish on it then ends
// unconfirmed and is sent again on the next one). Nil-safe.
func (s *socket) uncork() {
	if s == nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.corks--
	s.flushLocked()
}

// flushLocked sends the held bytes; s.wmu is held.
func (s *socket) flushLocked() error {
	if len(s.held) == 0 {
		return nil
	}
	_, err := s.write(s.held)
	s.held = s.held[:0]
	if err != nil {
		s.broke.CompareAndSwap(nil, &err)
		_ = s.Close()
	}
	return err
}

// said is err, unless it only says the socket is closed and the socket was
// closed because a send of held bytes failed: then that failure, the real
// cause, which amqp091-go never saw (it took those bytes as written).
func (s *socket) said(err error) error {
	if err != nil && errors.Is(err, net.ErrClosed) {
		if cause := s.broke.Load(); cause != nil {
			return *cause
		}
	}
	return err
}

// Read reads from the connection (see said for its error).
func (s *socket) Read(b []byte) (int, error) {
	n, err := s.Conn.Read(b)
	return n, s.said(err)
}

// Write writes b, re-arming the write deadline as bytes move; while
// corked, it holds b back (see cork).
func (s *socket) Write(b []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.corks > 0 && len(s.held)+len(b) <= corkMax && !s.closed.Load() {
		s.held = append(s.held, b...)
		return len(b), nil
	}
	if err := s.flushLocked(); err != nil {
		return 0, err
	}
	n, err := s.write(b)
	return n, s.said(err)
}

// write sends b on the TCP connection; s.wmu is held.
func (s *socket) write(b []byte) (int, error) {
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

// Close closes the socket and opens the gate above it, so a read held
// there ends; idempotent.
//
// A socket is aborted (a reset, SO_LINGER 0) unless its connection ended
// cleanly: the broker's connection.close-ok was the last thing read, and
// the kernel holds no byte the peer has not acknowledged (within
// closeDrain). A reset throws away what the kernel still holds rather than
// sending it, and tells whatever relays the connection (a TCP proxy, a
// load balancer) to throw away what it holds too. Closed the usual way, a
// connection given up during a network cut (a heartbeat timeout, a stall,
// Close's context ending) would deliver its last publishes when the cut
// heals, after their callers were told they failed and had sent them
// again elsewhere, so behind what was sent since (field seed 1063112964).
// That the kernel holds nothing is not enough: behind a proxy, the proxy
// acknowledged the bytes, and a FIN only tells it to deliver them once it
// can (field seed 2014027197: a relay's publishes, given up 15 s into
// isolate-clients f3, reached f3 through the field's proxy 3.7 s after the
// heal). Nothing is lost by a reset: a publish counts only once confirmed,
// an ack only once the broker has it. A clean close still ends with a
// FIN, which the broker logs as an orderly close; where the kernel cannot
// say what it holds (not Linux), the socket is always reset.
func (s *socket) Close() error {
	var err error
	if !s.closed.Swap(true) {
		if !s.closedOK.Load() || !drained(s.Conn, closeDrain) {
			if tc, ok := s.Conn.(interface{ SetLinger(int) error }); ok {
				_ = tc.SetLinger(0)
			}
		}
		err = s.Conn.Close()
	}
	s.release()
	return err
}

// closeDrain is how long Close waits for the broker to acknowledge what
// the socket sent before it resets the connection: a few round trips on
// the longest path a broker is used over; what a clean close sent last
// (a TLS close_notify) is acknowledged well within it.
const closeDrain = 250 * time.Millisecond

// drained waits up to wait for c's kernel to hold no byte for the peer
// (every byte sent and acknowledged), and says whether it does; false when
// it cannot tell.
func drained(c net.Conn, wait time.Duration) bool {
	end := time.Now().Add(wait)
	for {
		n, ok := unacked(c)
		if !ok {
			return false
		}
		if n == 0 {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
