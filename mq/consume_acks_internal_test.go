package mq

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// fakeBroker keeps a channel's outstanding deliveries as RabbitMQ does: a
// multiple ack must name an outstanding tag and takes every outstanding
// tag up to it; anything else is the 406 that kills a channel.
type fakeBroker struct {
	mu          sync.Mutex
	outstanding map[uint64]bool
	acked       map[uint64]int
	returned    map[uint64]int
	// mustNotCover is asked, at each ack, whether a tag may be covered now
	// (not being handled, not waiting).
	mustNotCover func(tag uint64) bool
	errs         []string
	frames       int
}

func newFakeBroker(n int) *fakeBroker {
	f := &fakeBroker{outstanding: map[uint64]bool{}, acked: map[uint64]int{}, returned: map[uint64]int{}}
	for t := uint64(1); t <= uint64(n); t++ {
		f.outstanding[t] = true
	}
	return f
}

func (f *fakeBroker) ack(tag uint64, multiple bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frames++
	if !f.outstanding[tag] {
		f.errs = append(f.errs, fmt.Sprintf("ack(%d, %v): unknown delivery tag", tag, multiple))
		return fmt.Errorf("406 unknown delivery tag %d", tag)
	}
	for t := range f.outstanding {
		if t == tag || (multiple && t < tag) {
			if f.mustNotCover != nil && f.mustNotCover(t) {
				f.errs = append(f.errs, fmt.Sprintf("ack(%d, %v) covered %d, which is not settled positively", tag, multiple, t))
			}
			delete(f.outstanding, t)
			f.acked[t]++
		}
	}
	return nil
}

func (f *fakeBroker) give(tag uint64, _ giveBack) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frames++
	if !f.outstanding[tag] {
		f.errs = append(f.errs, fmt.Sprintf("nack(%d): unknown delivery tag", tag))
		return fmt.Errorf("406 unknown delivery tag %d", tag)
	}
	delete(f.outstanding, tag)
	f.returned[tag]++
	return nil
}

// Random settlement orders, outcomes and delays from 8 goroutines: every
// positive settlement is acknowledged exactly once, no ack ever names a
// tag the broker does not hold or covers one being handled, waiting or
// returned, and the frames are far fewer than the messages.
func TestAckerNeverCoversAnUnsettledDelivery(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			const n = 2000
			rng := rand.New(rand.NewPCG(seed, 7))
			f := newFakeBroker(n)
			var stateMu sync.Mutex
			positive := map[uint64]bool{} // settled positively by the "handler"
			f.mustNotCover = func(tag uint64) bool {
				stateMu.Lock()
				defer stateMu.Unlock()
				return !positive[tag]
			}
			a := newAcker(f.ack, f.give, 100)
			// Half the seeds also move on now and then: the acker holds acks
			// on a "left" channel and promises moves at random.
			moves := seed%2 == 1
			if moves {
				mrng := rand.New(rand.NewPCG(seed, 11)) // only used under a.mu
				a.stuck = func() bool { return mrng.IntN(3) == 0 }
			}
			type job struct {
				tag     uint64
				nack    bool
				requeue bool
				delay   time.Duration
			}
			jobs := make(chan job)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for j := range jobs {
						time.Sleep(j.delay)
						if j.nack {
							how := giveReject
							if j.requeue {
								how = giveRequeue
							}
							_ = a.Give(j.tag, how)
							continue
						}
						stateMu.Lock()
						positive[j.tag] = true
						stateMu.Unlock()
						_ = a.Ack(j.tag)
					}
				})
			}
			var nacked []uint64
			for tag := uint64(1); tag <= n; tag++ {
				j := job{tag: tag}
				switch r := rng.IntN(100); {
				case r < 5:
					j.nack, j.requeue = true, r < 2
					nacked = append(nacked, tag)
				case r < 8:
					j.delay = time.Duration(rng.IntN(20)) * time.Millisecond // "waiting"
				default:
					j.delay = time.Duration(rng.IntN(200)) * time.Microsecond
				}
				jobs <- j
				if moves && tag%300 == 0 {
					a.Leave(tag%600 == 0) // left, then consumed on again
				}
			}
			close(jobs)
			wg.Wait()
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, e := range f.errs[:min(len(f.errs), 5)] {
				t.Error(e)
			}
			if len(f.outstanding) != 0 {
				t.Errorf("%d deliveries never settled on the wire", len(f.outstanding))
			}
			for _, tag := range nacked {
				if f.acked[tag] != 0 {
					t.Errorf("tag %d was nacked and acked", tag)
				}
			}
			for tag, c := range f.acked {
				if c != 1 {
					t.Errorf("tag %d acked %d times", tag, c)
				}
			}
			t.Logf("%d deliveries, %d nacked, %d frames", n, len(nacked), f.frames)
		})
	}
}

// Settled in order, as one worker settles them, acks go out one frame per
// half window.
func TestAckerCoalescesInOrderAcks(t *testing.T) {
	const n = 1000
	f := newFakeBroker(n)
	a := newAcker(f.ack, f.give, 100)
	for tag := uint64(1); tag <= n; tag++ {
		if err := a.Ack(tag); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(f.errs) > 0 || len(f.outstanding) > 0 {
		t.Fatalf("errors %v, %d outstanding", f.errs, len(f.outstanding))
	}
	if f.frames > n/50+2 {
		t.Errorf("%d frames for %d in-order acks, want about one per 50", f.frames, n)
	}
}

// A long wait low in the window does not hold back the acks above it:
// they go one by one at the next flush, so the broker's window does not
// fill with handled messages.
func TestAckerAcksAboveAWaitingDeliveryAlone(t *testing.T) {
	f := newFakeBroker(10)
	a := newAcker(f.ack, f.give, 100)
	for tag := uint64(2); tag <= 10; tag++ { // tag 1 is waiting
		if err := a.Ack(tag); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if !f.outstanding[1] || len(f.outstanding) != 1 {
		t.Errorf("outstanding after the flush: %v, want only the waiting tag 1", f.outstanding)
	}
	f.mu.Unlock()
	if err := a.Ack(1); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(f.errs) > 0 || len(f.outstanding) > 0 {
		t.Errorf("errors %v, outstanding %v", f.errs, f.outstanding)
	}
}

// The timer sends what waits within ackDelay.
func TestAckerTimer(t *testing.T) {
	f := newFakeBroker(3)
	a := newAcker(f.ack, f.give, 100)
	_ = a.Ack(1)
	_ = a.Ack(2)
	deadline := time.Now().Add(time.Second)
	for {
		f.mu.Lock()
		left := len(f.outstanding)
		f.mu.Unlock()
		if left == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the timer did not flush within 1 s: %d outstanding", left)
		}
		time.Sleep(time.Millisecond)
	}
	a.Drop()
	if err := a.Ack(3); err == nil {
		t.Error("Ack after Drop succeeded")
	}
}

// Acks sent one by one above a waiting delivery go lowest tag first: the
// broker finds each by walking the channel's unacknowledged deliveries
// from the oldest, so any other order makes each walk longer.
func TestAckerAcksAboveAHoleLowestFirst(t *testing.T) {
	f := newFakeBroker(41)
	var order []uint64
	ack := func(tag uint64, multiple bool) error {
		if !multiple {
			order = append(order, tag)
		}
		return f.ack(tag, multiple)
	}
	a := newAcker(ack, f.give, 1000)
	for tag := uint64(2); tag <= 41; tag++ { // tag 1 is waiting
		if err := a.Ack(tag); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(order) != 40 {
		t.Fatalf("%d single acks, want 40", len(order))
	}
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("single acks in the order %v, want lowest first", order)
		}
	}
}

// On a channel the subscription moved from, acks above a waiting delivery
// wait for it (up to leftDelay) and then go out as one multiple ack.
func TestAckerOnALeftChannelWaitsForTheHole(t *testing.T) {
	f := newFakeBroker(81)
	a := newAcker(f.ack, f.give, 100)
	a.Leave(true)
	for tag := uint64(2); tag <= 81; tag++ { // tag 1 waits
		if err := a.Ack(tag); err != nil {
			t.Fatal(err)
		}
	}
	if f.frames != 0 {
		t.Fatalf("%d frames sent above the waiting tag 1 on a left channel, want none yet", f.frames)
	}
	if err := a.Ack(1); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if f.frames != 1 || len(f.outstanding) != 0 || len(f.errs) > 0 {
		t.Errorf("%d frames, %d outstanding, errors %v: want one multiple ack for all 81", f.frames, len(f.outstanding), f.errs)
	}
}

// When acks pile up above a hole on the channel consumed on, the acker
// asks to move on (stuck); once the move is promised it holds them as on a
// left channel. Refused, it sends them one by one as before.
func TestAckerStuckAsksToMoveOn(t *testing.T) {
	for _, promise := range []bool{true, false} {
		t.Run(fmt.Sprint(promise), func(t *testing.T) {
			f := newFakeBroker(101)
			a := newAcker(f.ack, f.give, 100)
			asked := 0
			a.stuck = func() bool { asked++; return promise }
			for tag := uint64(2); tag <= 101; tag++ { // tag 1 waits
				if err := a.Ack(tag); err != nil {
					t.Fatal(err)
				}
			}
			if asked == 0 {
				t.Fatal("100 acks above a hole and the acker never asked to move")
			}
			if promise && f.frames != 0 {
				t.Errorf("move promised, yet %d frames sent above the hole", f.frames)
			}
			if !promise && f.frames < 50 {
				t.Errorf("move refused, yet only %d single acks sent above the hole", f.frames)
			}
		})
	}
}

func TestReleaseRestNamesTheHighestTagStillHeld(t *testing.T) {
	var gives []string
	a := newAcker(func(uint64, bool) error { return nil }, func(tag uint64, how giveBack) error {
		gives = append(gives, fmt.Sprint(tag, how))
		return nil
	}, defaultPrefetch)
	_ = a.Ack(1)
	_ = a.Ack(3)
	_ = a.Give(5, giveRequeue)
	released, err := a.ReleaseRest(6)
	if err != nil || !released {
		t.Fatalf("released %v, %v", released, err)
	}
	want := []string{fmt.Sprint(5, giveRequeue), fmt.Sprint(6, giveReleaseUpTo)}
	if fmt.Sprint(gives) != fmt.Sprint(want) {
		t.Errorf("gave %v, want %v (one multiple nack naming 6)", gives, want)
	}
	if err := a.Ack(2); err == nil {
		t.Error("an ack after ReleaseRest was taken")
	}
	b := newAcker(func(uint64, bool) error { return nil }, func(tag uint64, how giveBack) error {
		if how == giveReleaseUpTo {
			t.Errorf("released up to %d with nothing held", tag)
		}
		return nil
	}, defaultPrefetch)
	_ = b.Ack(1)
	_ = b.Give(2, giveReject)
	if released, _ := b.ReleaseRest(2); released {
		t.Error("released with every tag settled")
	}
}
