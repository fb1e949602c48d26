package mq

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// laneWire records what a lane's acker sends.
type laneWire struct {
	mu    sync.Mutex
	acks  []uint64 // multiple acks, by tag
	lones []uint64 // single acks
	gives []uint64
}

func (w *laneWire) ack(tag uint64, multiple bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if multiple {
		w.acks = append(w.acks, tag)
	} else {
		w.lones = append(w.lones, tag)
	}
	return nil
}

func (w *laneWire) give(tag uint64, _ giveBack) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gives = append(w.gives, tag)
	return nil
}

func (w *laneWire) multiples() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint64(nil), w.acks...)
}

// testLane is a lane with no channel: held deliveries received and not
// settled, waiting of them waiting in-process.
func testLane(held, waiting int32) (*lane, *laneWire) {
	w := &laneWire{}
	l := &lane{acks: newAcker(w.ack, w.give, defaultPrefetch)}
	l.held.Store(held)
	l.waiting.Store(waiting)
	return l, w
}

// left marks l as a lane the session moved from, its stream ended.
func left(l *lane) *lane {
	l.cur = &stream{lane: l, retired: true, ended: true}
	return l
}

// consuming gives l a live stream.
func consuming(l *lane) *lane {
	l.cur = &stream{lane: l}
	return l
}

func testSession(cfg consumerConfig, active *lane, lanes ...*lane) *session {
	s := &session{c: &Consumer{cfg: cfg}, move: make(chan struct{}, 1), draining: make(chan struct{}),
		lanes: append([]*lane{active}, lanes...)}
	s.active.Store(active)
	return s
}

func (s *session) moveAsked() bool {
	select {
	case <-s.move:
		return true
	default:
		return false
	}
}

func TestPickLockedChoosesTheLaneToMoveTo(t *testing.T) {
	cases := []struct {
		name    string
		old     int32 // waiting on the lane consumed on
		others  func() []*lane
		canOpen bool
		want    int // index into others, -1 for none (open a new lane, or stay)
	}{
		{"nothing else: open one", 16, func() []*lane { return nil }, true, -1},
		{"a spare comes first", 16, func() []*lane {
			a, _ := testLane(0, 0)
			b, _ := testLane(0, 0)
			return []*lane{left(a), b}
		}, true, 1},
		{"the emptiest left lane", 16, func() []*lane {
			a, _ := testLane(5, 5)
			b, _ := testLane(2, 2)
			c, _ := testLane(7, 7)
			return []*lane{left(a), left(b), left(c)}
		}, true, 1},
		{"a lane whose stream has not ended is no choice", 16, func() []*lane {
			a, _ := testLane(0, 0)
			a.cur = &stream{lane: a, retired: true} // cancelled, deliveries still coming
			b, _ := testLane(0, 0)
			return []*lane{a, consuming(b)}
		}, true, -1},
		{"a busy left lane: open a new one while there is room", 16, func() []*lane {
			a, _ := testLane(laneWaiters/2, 3)
			return []*lane{left(a)}
		}, true, -1},
		{"a busy left lane with fewer than wait here, no room: reuse it", 16, func() []*lane {
			a, _ := testLane(laneWaiters/2, 3)
			return []*lane{left(a)}
		}, false, 0},
		{"a busy left lane with as many as wait here, no room: stay", laneWaiters / 2, func() []*lane {
			a, _ := testLane(laneWaiters/2, 3)
			return []*lane{left(a)}
		}, false, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old, _ := testLane(c.old, c.old)
			others := c.others()
			s := testSession(consumerConfig{}, consuming(old), others...)
			got := s.pickLocked(old, c.canOpen)
			switch {
			case c.want < 0 && got != nil:
				t.Errorf("pickLocked chose a lane holding %d, want none", got.held.Load())
			case c.want >= 0 && got != others[c.want]:
				t.Errorf("pickLocked chose %v, want lane %d", got, c.want)
			}
		})
	}
}

func TestRefreshFreeLockedSaysWhetherALaneIsAtHand(t *testing.T) {
	old, _ := testLane(16, 16)
	busy, _ := testLane(laneWaiters, laneWaiters)
	s := testSession(consumerConfig{}, consuming(old), left(busy))
	s.refreshFreeLocked()
	if s.free.Load() {
		t.Error("free with only a lane holding as many as wait on the active one")
	}
	spare, _ := testLane(0, 0)
	s.lanes = append(s.lanes, spare)
	s.refreshFreeLocked()
	if !s.free.Load() {
		t.Error("not free with a spare lane")
	}
}

func TestStreamEndedGoesOnOnlyPastAStreamLeftByAMove(t *testing.T) {
	a, wa := testLane(0, 0)
	b, _ := testLane(0, 0)
	first := &stream{lane: a}
	second := &stream{lane: b}
	a.cur, b.cur = first, second
	s := testSession(consumerConfig{}, b, a)
	s.streams = []*stream{first, second}
	s.head.Store(first)

	// A stream closed under the session (the broker cancelled it, the
	// channel died) ends the session.
	if s.streamEnded(first) {
		t.Fatal("streamEnded went on past a stream no move had left")
	}
	if s.reading() != first || len(s.streams) != 2 {
		t.Fatal("a stream that ends the session was dropped from it")
	}

	// One left by a move: the workers read the next, and the lane's acks,
	// with nothing on it held, go out.
	if err := a.acks.Ack(1); err != nil {
		t.Fatal(err)
	}
	first.retired = true
	if !s.streamEnded(first) {
		t.Fatal("streamEnded ended the session at a stream left by a move")
	}
	if s.reading() != second || len(s.streams) != 1 || !first.ended {
		t.Fatalf("after the left stream ended: reading %p (want %p), %d streams", s.reading(), second, len(s.streams))
	}
	if got := wa.multiples(); len(got) != 1 || got[0] != 1 {
		t.Errorf("acks sent on the left lane = %v, want one multiple ack of 1", got)
	}
	// Found closed again by another worker: still going on, nothing twice.
	if !s.streamEnded(first) || len(s.streams) != 1 {
		t.Error("a second worker finding the left stream closed changed the session")
	}
}

func TestDropHeldFlushesALeftLaneOnceNothingOnItIsHeld(t *testing.T) {
	l, w := testLane(2, 1)
	left(l)
	l.acks.Leave(true)
	s := testSession(consumerConfig{}, consuming(&lane{}), l)

	// Delivery 2 is settled above delivery 1, which still waits.
	if err := l.acks.Ack(2); err != nil {
		t.Fatal(err)
	}
	s.dropHeld(l)
	if got := w.multiples(); len(got) != 0 {
		t.Fatalf("a multiple ack %v went out with delivery 1 still held", got)
	}
	// Delivery 1's wait ends in a return: nothing on the lane is held, and
	// the ack of 2 goes out at once as one multiple ack, not after a timer.
	l.waiting.Store(0)
	if err := l.acks.Give(1, giveRequeue); err != nil {
		t.Fatal(err)
	}
	s.dropHeld(l)
	if got := w.multiples(); len(got) != 1 || got[0] != 2 {
		t.Errorf("multiple acks on the left lane = %v, want [2]", got)
	}
	if l.held.Load() != 0 {
		t.Errorf("held = %d after both settled", l.held.Load())
	}
}

func TestWaitStartsAsksAMoveOnlyOnTheLaneConsumedOn(t *testing.T) {
	active, _ := testLane(0, 0)
	other, _ := testLane(0, 0)
	s := testSession(consumerConfig{}, consuming(active), left(other))
	for range laneWaiters - 1 {
		s.waitStarts(active)
	}
	if s.moveAsked() {
		t.Fatalf("a move was asked with %d waiting", laneWaiters-1)
	}
	s.waitStarts(active)
	if !s.moveAsked() {
		t.Fatalf("no move asked with %d waiting on the lane consumed on", laneWaiters)
	}
	for range laneWaiters {
		s.waitStarts(other)
	}
	if s.moveAsked() {
		t.Error("waits on a lane already left asked for a move")
	}
	s.waitEnds(active)
	if active.waiting.Load() != laneWaiters-1 {
		t.Errorf("waiting = %d after one wait ended", active.waiting.Load())
	}
	// A second ask while one is pending is dropped, never blocks.
	s.askMove()
	s.askMove()
	if !s.moveAsked() || s.moveAsked() {
		t.Error("asks for a move did not coalesce into one")
	}
}

func TestStuckAcksAsksAMoveOnlyWhenItHelps(t *testing.T) {
	active, _ := testLane(4, 1)
	s := testSession(consumerConfig{}, consuming(active))
	stuck := s.stuckAcks(active)
	if stuck() || s.moveAsked() {
		t.Fatal("stuck asked for a move with no lane free")
	}
	s.free.Store(true)
	if !stuck() || !s.moveAsked() {
		t.Fatal("stuck did not ask for a move with a lane free and a delivery waiting")
	}
	active.waiting.Store(0)
	if stuck() || s.moveAsked() {
		t.Fatal("stuck asked for a move with nothing waiting")
	}
	active.waiting.Store(1)
	other, _ := testLane(0, 0)
	s.active.Store(other)
	if stuck() || s.moveAsked() {
		t.Error("stuck asked for a move for a lane no longer consumed on")
	}
}

func TestJoinWatchesStuckAcksOnlyWhereAMoveCanHelp(t *testing.T) {
	cases := []struct {
		name string
		cfg  consumerConfig
		want bool
	}{
		{"wide window, lanes, coalesced acks", consumerConfig{prefetch: stuckMinPrefetch, maxWaiting: defaultMaxWaiting}, true},
		{"narrow window", consumerConfig{prefetch: stuckMinPrefetch - 1, maxWaiting: defaultMaxWaiting}, false},
		{"one lane", consumerConfig{prefetch: stuckMinPrefetch, maxWaiting: 0}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, _ := testLane(0, 0)
			l.closes = make(chan *amqp.Error)
			l.cancel = make(chan string)
			s := testSession(c.cfg, l)
			s.lost, s.cancels = make(chan *amqp.Error, 1), make(chan string, 1)
			s.join(l)
			if got := l.acks.stuck != nil; got != c.want {
				t.Errorf("stuck watched = %v, want %v", got, c.want)
			}
			close(l.closes) // ends the watcher: a closed channel is a lost one
			if e := <-s.lost; e != nil {
				t.Errorf("lost = %v for a closed notification channel, want nil", e)
			}
		})
	}
}

func TestMaxLanesAndQos(t *testing.T) {
	cases := []struct {
		cfg        consumerConfig
		lanes, qos int
	}{
		{consumerConfig{prefetch: 32, maxWaiting: 0}, 1, 32},
		{consumerConfig{prefetch: 32, maxWaiting: 1}, 2, 33},
		{consumerConfig{prefetch: 32, maxWaiting: laneWaiters}, 2, 32 + laneWaiters},
		{consumerConfig{prefetch: 32, maxWaiting: laneWaiters + 1}, 3, 32 + laneWaiters},
		{consumerConfig{prefetch: 32, maxWaiting: defaultMaxWaiting}, 1 + defaultMaxWaiting/laneWaiters, 32 + laneWaiters},
		{consumerConfig{prefetch: 65535, maxWaiting: defaultMaxWaiting}, 1 + defaultMaxWaiting/laneWaiters, 65535},
	}
	for _, c := range cases {
		if got := c.cfg.maxLanes(); got != c.lanes {
			t.Errorf("maxLanes(prefetch %d, maxWaiting %d) = %d, want %d", c.cfg.prefetch, c.cfg.maxWaiting, got, c.lanes)
		}
		if got := c.cfg.qos(); got != c.qos {
			t.Errorf("qos(prefetch %d, maxWaiting %d) = %d, want %d", c.cfg.prefetch, c.cfg.maxWaiting, got, c.qos)
		}
	}
}

func TestLanesTakeAtMostHalfTheChannels(t *testing.T) {
	c := &conn{c: &amqp.Connection{Config: amqp.Config{ChannelMax: 20}}}
	for i := range 10 {
		if !c.takeLane() {
			t.Fatalf("lane %d of a budget of 10 refused", i+1)
		}
	}
	if c.takeLane() {
		t.Fatal("an 11th lane on a connection of 20 channels was granted")
	}
	c.dropLane()
	if !c.takeLane() {
		t.Fatal("a lane given back was not granted again")
	}
}

// A channel that dies tells its close (the error) and then closes its
// cancel notifications, and both are ready together: the session must
// read that as a lost channel, never as a broker cancel. Read as a cancel,
// a poison message's connection deaths were counted as cancels of a queue
// that stays, and acemq.consumer.poison was missed
// (TestHardeningPoisonMessage, CI of 2026-12-02).
func TestWatchReadsAChannelShutdownAsALossNotACancel(t *testing.T) {
	dead := &amqp.Error{Code: amqp.FrameError, Reason: "invalid field or value inside of a frame"}
	for i := range 200 {
		l := &lane{closes: make(chan *amqp.Error, 1), cancel: make(chan string, 1)}
		l.closes <- dead
		close(l.cancel)
		s := &session{lost: make(chan *amqp.Error, 1), cancels: make(chan string, 1)}
		s.watch(l)
		select {
		case e := <-s.lost:
			if e != dead {
				t.Fatalf("round %d: lost %v, want the channel's close %v", i, e, dead)
			}
		case tag := <-s.cancels:
			t.Fatalf("round %d: a channel shutdown read as a broker cancel (tag %q)", i, tag)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the shutdown was not told", i)
		}
	}
	// A real cancel (a tag sent, the channel alive) is still a cancel.
	l := &lane{closes: make(chan *amqp.Error, 1), cancel: make(chan string, 1)}
	l.cancel <- "ctag-1"
	s := &session{lost: make(chan *amqp.Error, 1), cancels: make(chan string, 1)}
	s.watch(l)
	select {
	case tag := <-s.cancels:
		if tag != "ctag-1" {
			t.Errorf("cancel tag %q, want ctag-1", tag)
		}
	case e := <-s.lost:
		t.Errorf("a broker cancel read as a loss: %v", e)
	case <-time.After(5 * time.Second):
		t.Error("the cancel was not told")
	}
}

// A dying channel closes its deliveries and tells its close a moment
// apart, in either order as the session sees them: workers that found
// their deliveries ended before the close was told still end the session
// as a lost channel, with the close's error, not "delivery stream ended".
func TestServeReadsDeliveriesEndedByADeadChannelAsItsLoss(t *testing.T) {
	dead := &amqp.Error{Code: amqp.FrameError, Reason: "invalid field or value inside of a frame"}
	deliveries := make(chan amqp.Delivery)
	l, _ := testLane(0, 0)
	l.closes, l.cancel = make(chan *amqp.Error, 1), make(chan string, 1)
	st := &stream{lane: l, deliveries: deliveries}
	l.cur = st
	s := testSession(consumerConfig{concurrency: 1}, l)
	s.c.stopping, s.c.abort = make(chan struct{}), make(chan struct{})
	s.lost, s.cancels, s.refused = make(chan *amqp.Error, 1), make(chan string, 1), make(chan string, 1)
	s.moverDone = make(chan struct{})
	s.streams = []*stream{st}
	s.head.Store(st)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer s.cancel()
	s.watch(l)
	close(deliveries)
	go func() {
		time.Sleep(20 * time.Millisecond) // the close told after the workers saw the end
		l.closes <- dead
		close(l.closes)
		close(l.cancel)
	}()
	if why := s.serve(); why != dead.Error() {
		t.Errorf("serve ended with %q, want the channel's close %q", why, dead.Error())
	}
}

// The consumer tag is the library's own: the connection's name, the queue
// and a sequence number, its end kept when the whole is too long for the
// short string AMQP carries it in, so the tag stays unique per consumer.
func TestConsumerTagNamesConnectionAndQueue(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Delivery) error { return nil })
	a := consumerConfigOf("billing", "orders", h, nil)
	b := consumerConfigOf("billing", "orders", h, nil)
	if errors.Join(a.errs...) != nil || !strings.HasPrefix(a.tag, "billing.orders.") || a.tag == b.tag {
		t.Errorf("tags %q and %q (errors %v): want billing.orders.<n>, distinct", a.tag, b.tag, errors.Join(a.errs...))
	}
	long := consumerConfigOf(strings.Repeat("c", 300), "orders", h, nil)
	if errors.Join(long.errs...) != nil || len(long.tag) != 255 || !strings.Contains(long.tag, ".orders.") {
		t.Errorf("tag of a 300-byte connection name: %d bytes %q (errors %v); want its last 255 bytes", len(long.tag), long.tag, errors.Join(long.errs...))
	}
}
