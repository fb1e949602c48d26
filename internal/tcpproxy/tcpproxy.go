package tcpproxy

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// Proxy forwards connections from a loopback listener to a target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	refuse  bool
	flap    bool   // close each connection right after its AMQP handshake
	blockAt string // non-empty: send connection.blocked with this reason right after each handshake
	deaf    bool   // stop reading from clients and keep their sockets open
	opened  atomic.Int64
	stalled [2]bool              // [toBroker, toClient]: hold bytes instead of forwarding them
	resume  chan struct{}        // closed (and replaced) when a stall ends or a Cut happens
	framers map[net.Conn]*framer // broker-to-client streams, by client connection
	wg      sync.WaitGroup
	cuts    atomic.Int64
	accepts atomic.Int64
	resets  atomic.Int64

	sentMu sync.Mutex
	sent   map[[2]uint16]int64  // methods clients sent, by {class, method}
	last   map[[2]uint16][]byte // the arguments of the last of each, as far as framer.head holds them
}

// Start listens on 127.0.0.1 (a free port) and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, resume: make(chan struct{}),
		framers: map[net.Conn]*framer{}, sent: map[[2]uint16]int64{}, last: map[[2]uint16][]byte{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy now; new ones are still
// accepted. It returns how many it cut.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
		n++
	}
	p.cuts.Add(1)
	p.wakeLocked() // stalled pipes drop what they held and end
	return n / 2
}

// Stall stops forwarding bytes in the given directions, without closing
// anything: toBroker holds what clients send, toClient holds what the
// broker answers (a confirm, a delivery). The bytes are held, not dropped:
// Stall(false, false) forwards them. A Cut while stalled drops them with the
// connections. A stall is a network that goes quiet rather than breaking:
// only heartbeats notice it.
func (p *Proxy) Stall(toBroker, toClient bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = [2]bool{toBroker, toClient}
	p.wakeLocked()
}

func (p *Proxy) wakeLocked() {
	close(p.resume)
	p.resume = make(chan struct{})
}

// Refuse makes the proxy close new connections at once (a broker that is
// down) until Refuse(false).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// FlapAfterHandshake makes the proxy close every connection right after
// the broker's connection.open-ok went through to the client (an endpoint
// that accepts and then drops every connection: the client sees a
// successful dial, then a lost connection), until FlapAfterHandshake(false).
func (p *Proxy) FlapAfterHandshake(on bool) {
	p.mu.Lock()
	p.flap = on
	p.mu.Unlock()
}

// StopReading makes the proxy stop reading what clients send, so that
// their writes block once the socket buffers are full, and keep every
// client socket open even when the broker closes its side: a network that
// stopped draining, which only a client's own deadline notices.
// StopReading(false) reads (and forwards) again; a Cut closes everything.
func (p *Proxy) StopReading(on bool) {
	p.mu.Lock()
	p.deaf = on
	p.wakeLocked()
	p.mu.Unlock()
}

// BlockAfterHandshake makes the proxy slip a connection.blocked with
// reason into every new connection right after connection.open-ok, as a
// broker under a resource alarm does; "" stops it.
func (p *Proxy) BlockAfterHandshake(reason string) {
	p.mu.Lock()
	p.blockAt = reason
	p.mu.Unlock()
}

// Sent is how many frames of the AMQP method class.method clients have
// sent through the proxy (basic.reject is 60, 90; basic.nack 60, 120).
func (p *Proxy) Sent(class, method uint16) int64 {
	p.sentMu.Lock()
	defer p.sentMu.Unlock()
	return p.sent[[2]uint16{class, method}]
}

// LastSent is the start of the arguments of the last class.method frame
// clients sent (up to 12 bytes: basic.nack's delivery tag, 8 bytes, then
// its bits, multiple 1 and requeue 2); nil if none was sent.
func (p *Proxy) LastSent(class, method uint16) []byte {
	p.sentMu.Lock()
	defer p.sentMu.Unlock()
	return p.last[[2]uint16{class, method}]
}

func (p *Proxy) count(class, method uint16, args []byte) {
	k := [2]uint16{class, method}
	p.sentMu.Lock()
	p.sent[k]++
	p.last[k] = append([]byte(nil), args...)
	p.sentMu.Unlock()
}

// Opened is how many AMQP connections completed their handshake through
// the proxy (connection.open-ok seen).
func (p *Proxy) Opened() int64 { return p.opened.Load() }

// Accepted is how many client connections the proxy has forwarded.
func (p *Proxy) Accepted() int64 { return p.accepts.Load() }

// ClientResets is how many client connections ended with a reset from the
// client (rather than the end of the stream, a FIN), passed on to the
// broker's side as a reset.
func (p *Proxy) ClientResets() int64 { return p.resets.Load() }

// Close stops listening, cuts every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.accepts.Add(1)
		f := &framer{dst: c}
		f.onOpen = func() {
			p.opened.Add(1)
			p.mu.Lock()
			flap, reason := p.flap, p.blockAt
			p.mu.Unlock()
			if reason != "" {
				f.pending = append(f.pending, methodFrame(connectionBlocked(reason)))
			}
			if flap {
				_ = c.Close()
				_ = up.Close()
			}
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.conns[up] = struct{}{}
		p.framers[c] = f
		p.mu.Unlock()
		// The client's stream starts with the 8-byte protocol header, then
		// frames; its methods are counted (Sent).
		toUp := &framer{dst: up, skip: 8, onMethod: p.count}
		p.wg.Add(2)
		go p.pipe(f, up, toClient)
		go p.pipe(toUp, c, toBroker)
	}
}

// SendBlocked makes the broker appear to block publishing on every
// connection through the proxy (a resource alarm): it slips a
// connection.blocked frame with reason into each broker-to-client stream,
// between two frames. The broker itself blocks nothing.
func (p *Proxy) SendBlocked(reason string) {
	p.sendToClients(connectionBlocked(reason))
}

// connectionBlocked is the payload of a connection.blocked with reason, a
// short string: cut to 255 bytes.
func connectionBlocked(reason string) []byte {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	return append([]byte{0, 10, 0, 60, byte(len(reason))}, reason...)
}

// methodFrame frames a method payload on channel 0.
func methodFrame(payload []byte) []byte {
	frame := make([]byte, 7, 7+len(payload)+1)
	frame[0] = 1
	binary.BigEndian.PutUint32(frame[3:7], uint32(len(payload)))
	return append(append(frame, payload...), 0xCE)
}

// SendUnblocked slips a connection.unblocked frame into every
// broker-to-client stream (see SendBlocked).
func (p *Proxy) SendUnblocked() {
	p.sendToClients([]byte{0, 10, 0, 61})
}

// sendToClients frames a connection-level method payload and queues it on
// every broker-to-client stream.
func (p *Proxy) sendToClients(payload []byte) {
	frame := methodFrame(payload)
	p.mu.Lock()
	fs := make([]*framer, 0, len(p.framers))
	for _, f := range p.framers {
		fs = append(fs, f)
	}
	p.mu.Unlock()
	for _, f := range fs {
		_ = f.inject(frame)
	}
}

// framer follows the AMQP frames of a stream: broker-to-client, so that
// frames of the proxy's own can be slipped in between two of the broker's;
// client-to-broker, to count the methods clients send.
type framer struct {
	dst      net.Conn
	skip     int                                     // bytes before the first frame (the client's protocol header)
	onMethod func(class, method uint16, args []byte) // called at the end of each method frame, if set

	mu        sync.Mutex
	hdr       [7]byte  // header of the frame in progress
	hn        int      // header bytes seen
	remaining int      // payload and frame-end bytes still to come
	head      [16]byte // the first payload bytes of the frame in progress: class, method, arguments
	headN     int
	pending   [][]byte
	onOpen    func() // called after connection.open-ok went through
	openSeen  bool
}

func (f *framer) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	total := len(b)
	for {
		if err := f.flushLocked(); err != nil {
			return 0, err
		}
		if len(b) == 0 {
			return total, nil
		}
		n, opened := f.advance(b)
		if _, err := f.dst.Write(b[:n]); err != nil {
			return 0, err
		}
		b = b[n:]
		if opened && !f.openSeen {
			f.openSeen = true
			if f.onOpen != nil {
				f.onOpen()
			}
		}
	}
}

// inject writes frame now if the stream is between frames, or after the
// frame in progress.
func (f *framer) inject(frame []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, frame)
	return f.flushLocked()
}

func (f *framer) flushLocked() error {
	if f.hn != 0 || len(f.pending) == 0 {
		return nil
	}
	for _, fr := range f.pending {
		if _, err := f.dst.Write(fr); err != nil {
			return err
		}
	}
	f.pending = nil
	return nil
}

// advance consumes b up to the end of the frame in progress (or all of b)
// and returns how many bytes that is, and whether that frame ended and was
// connection.open-ok.
func (f *framer) advance(b []byte) (int, bool) {
	n := 0
	for n < len(b) {
		if f.skip > 0 {
			k := min(f.skip, len(b)-n)
			f.skip -= k
			n += k
			continue
		}
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
			if size := int(binary.BigEndian.Uint32(f.hdr[3:7])); f.onMethod != nil && f.hdr[0] == 1 && size >= 4 && f.headN >= 4 {
				// size is the payload, without the frame end.
				f.onMethod(binary.BigEndian.Uint16(f.head[0:2]), binary.BigEndian.Uint16(f.head[2:4]), f.head[4:min(f.headN, size)])
			}
			open := f.hdr[0] == 1 && f.hdr[1] == 0 && f.hdr[2] == 0 && f.headN >= 4 &&
				binary.BigEndian.Uint16(f.head[0:2]) == 10 && binary.BigEndian.Uint16(f.head[2:4]) == 41
			return n, open
		}
	}
	return n, false
}

const (
	toBroker = 0
	toClient = 1
)

func (p *Proxy) pipe(w *framer, src net.Conn, dir int) {
	defer p.wg.Done()
	dst := w.dst
	buf := make([]byte, 32*1024)
	for {
		if dir == toBroker && !p.waitHearing(src) {
			break
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitFlowing(dst, dir) {
				break
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				if reset(werr) {
					abort(src)
				}
				break
			}
		}
		if err != nil { // io.EOF or a cut: either way this pair is done
			if reset(err) {
				abort(dst)
				if dir == toBroker {
					p.resets.Add(1)
				}
			}
			break
		}
	}
	if dir == toClient {
		p.waitHearing(dst) // a deaf proxy keeps the client's socket open
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	delete(p.framers, dst)
	delete(p.framers, src)
	p.mu.Unlock()
}

// waitHearing waits while the proxy does not read from clients (see
// StopReading); false when client was cut meanwhile.
func (p *Proxy) waitHearing(client net.Conn) bool {
	for {
		p.mu.Lock()
		_, live := p.conns[client]
		deaf, resume := p.deaf, p.resume
		p.mu.Unlock()
		if !live {
			return false
		}
		if !deaf {
			return true
		}
		<-resume
	}
}

// waitFlowing waits while dir is stalled; false when dst was cut meanwhile.
func (p *Proxy) waitFlowing(dst net.Conn, dir int) bool {
	for {
		p.mu.Lock()
		_, live := p.conns[dst]
		stalled, resume := p.stalled[dir], p.resume
		p.mu.Unlock()
		if !live {
			return false
		}
		if !stalled {
			return true
		}
		<-resume
	}
}

// reset says whether err says the peer reset its connection: a read's
// ECONNRESET, or a write's EPIPE once the reset has arrived.
func reset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// abort makes c's close a reset (SO_LINGER 0). A side that reset its
// connection threw away what its kernel held; the proxy resets the other
// side's connection likewise, or what its own kernel holds for that side
// would still arrive later, which a direct connection would not do (the
// library resets a connection it gives up: mq's socket.Close).
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}
