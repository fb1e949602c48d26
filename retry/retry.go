package retry

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// DefaultInProcessLimit is the longest wait a consumer waits in its own
// process; longer waits go through a broker rung. docs/contract.md, "Retry policy": 30 s.
const DefaultInProcessLimit = 30 * time.Second

// MaxAttempts bounds the number of deliveries a policy may ask for. A policy
// longer than this is almost certainly a unit mistake, and every attempt is
// a schedule entry held in memory.
const MaxAttempts = 1000

// maxBrokerWait is the longest x-message-ttl RabbitMQ accepts: 2^32-1 ms
// (its MAX_EXPIRY_TIMER, about 49.7 days). A rung waiting longer is refused
// by the broker with PRECONDITION_FAILED, so Validate refuses it first.
const maxBrokerWait = 4294967295 * time.Millisecond

// ErrInvalid is matched (errors.Is) by every error Validate returns.
var ErrInvalid = errors.New("retry: invalid policy")

// Policy says how often a message is delivered and how long to wait between
// deliveries. It is an immutable value: methods return copies, and the zero
// Policy is valid and means one attempt, no retries.
//
// Build one with [Exponential], [Fixed] or [Waits]. A constructor given bad input
// still returns a Policy; Validate reports what was wrong, so a policy can be
// written inline in a topology and checked with it.
type Policy struct {
	waits    []time.Duration
	limit    time.Duration
	limitSet bool
	durable  bool
	err      error
}

// Option adjusts a [Policy] at construction. Options are values of an
// interface with an unexported method, so only this package defines them.
type Option interface{ apply(*Policy) }

type optionFunc func(*Policy)

func (f optionFunc) apply(p *Policy) { f(p) }

// InProcessLimit sets the longest wait the consumer waits in its own process
// (default [DefaultInProcessLimit], 30 s). Waits of at most d are waited
// in-process; longer waits are published to a broker rung. InProcessLimit(0)
// sends every non-zero wait to the broker. A negative limit is invalid.
func InProcessLimit(d time.Duration) Option {
	return optionFunc(func(p *Policy) {
		if d < 0 {
			p.addErr(fmt.Errorf("InProcessLimit(%v): the limit must not be negative", d))
			return
		}
		p.limit, p.limitSet = d, true
	})
}

// DurableRungs keeps the policy's broker waits in durable rungs: quorum
// queues that dead-letter at least once (docs/contract.md, "Durable
// rungs"), so a wait survives a partition or a node's loss as its home
// queue does. The default is the family's classic rungs, which dead-letter
// at most once and lose what waits in them when their node is cut off.
// The choice travels with the policy: the topology that declares the queue
// and every consumer that runs the policy derive the same rungs from it.
// Anyone who runs a cluster should use it (RabbitMQ 3.10 or later; 4.3.3
// or later preferred). It changes nothing for waits in-process.
func DurableRungs() Option {
	return optionFunc(func(p *Policy) { p.durable = true })
}

// Exponential is attempts deliveries in all, with attempts-1 waits that
// double from first: Exponential(6, 10*time.Second) waits 10s, 20s, 40s, 80s
// and 160s.
func Exponential(attempts int, first time.Duration, opts ...Option) Policy {
	call := fmt.Sprintf("retry.Exponential(%d, %v)", attempts, first)
	p := Policy{}
	if !p.checkAttempts(call, attempts) {
		return p.with(opts)
	}
	if first < 0 {
		p.addErr(fmt.Errorf("%s: the first wait must not be negative", call))
		return p.with(opts)
	}
	p.waits = make([]time.Duration, 0, attempts-1)
	d := first
	for i := 1; i < attempts; i++ {
		p.waits = append(p.waits, d)
		if i+1 < attempts {
			if d > time.Duration(math.MaxInt64/2) {
				p.addErr(fmt.Errorf("%s: wait %d overflows a time.Duration", call, i+1))
				p.waits = nil
				return p.with(opts)
			}
			d *= 2
		}
	}
	return p.with(opts)
}

// Fixed is attempts deliveries in all with the same wait between each:
// Fixed(4, time.Minute) waits 1m three times.
func Fixed(attempts int, wait time.Duration, opts ...Option) Policy {
	call := fmt.Sprintf("retry.Fixed(%d, %v)", attempts, wait)
	p := Policy{}
	if !p.checkAttempts(call, attempts) {
		return p.with(opts)
	}
	if wait < 0 {
		p.addErr(fmt.Errorf("%s: the wait must not be negative", call))
		return p.with(opts)
	}
	p.waits = make([]time.Duration, attempts-1)
	for i := range p.waits {
		p.waits[i] = wait
	}
	return p.with(opts)
}

// Waits is an explicit list of waits: len(waits)+1 deliveries in all. Use
// With to add options such as [InProcessLimit].
func Waits(waits ...time.Duration) Policy {
	p := Policy{}
	if len(waits)+1 > MaxAttempts {
		p.addErr(fmt.Errorf("retry.Waits: %d waits is more than %d attempts", len(waits), MaxAttempts))
		return p
	}
	for i, w := range waits {
		if w < 0 {
			p.addErr(fmt.Errorf("retry.Waits: wait %d (%v) must not be negative", i+1, w))
		}
	}
	if p.err == nil {
		p.waits = slices.Clone(waits)
	}
	return p
}

// With returns a copy of p with opts applied.
func (p Policy) With(opts ...Option) Policy {
	p.waits = slices.Clone(p.waits)
	return p.with(opts)
}

func (p Policy) with(opts []Option) Policy {
	for _, o := range opts {
		if o != nil {
			o.apply(&p)
		}
	}
	return p
}

func (p *Policy) checkAttempts(call string, attempts int) bool {
	if attempts < 1 {
		p.addErr(fmt.Errorf("%s: attempts must be at least 1", call))
		return false
	}
	if attempts > MaxAttempts {
		p.addErr(fmt.Errorf("%s: attempts must be at most %d", call, MaxAttempts))
		return false
	}
	return true
}

func (p *Policy) addErr(err error) {
	p.err = errors.Join(p.err, err)
}

// Attempts is the number of deliveries in all, the first included.
func (p Policy) Attempts() int { return len(p.waits) + 1 }

// Schedule is the waits between deliveries, in order: Attempts()-1 of them.
func (p Policy) Schedule() []time.Duration { return slices.Clone(p.waits) }

// InProcessLimit is the longest wait waited in-process (default 30 s).
func (p Policy) InProcessLimit() time.Duration {
	if !p.limitSet {
		return DefaultInProcessLimit
	}
	return p.limit
}

// DurableRungs reports whether the policy's broker waits go through
// durable rungs (the [DurableRungs] option) rather than classic ones.
func (p Policy) DurableRungs() bool { return p.durable }

// InProcess reports whether a wait of d is waited in the consumer's process.
func (p Policy) InProcess(d time.Duration) bool { return d <= p.InProcessLimit() }

// BrokerRungs is the distinct waits longer than the in-process limit, in
// ascending order: one broker delay queue each.
func (p Policy) BrokerRungs() []time.Duration {
	var rungs []time.Duration
	for _, w := range p.waits {
		if !p.InProcess(w) {
			rungs = append(rungs, w)
		}
	}
	slices.Sort(rungs)
	return slices.Compact(rungs)
}

// Step is the answer to "attempt k failed: what now?": wait Wait (in the
// consumer when InProcess, else on a broker rung), then attempt Next; or,
// when Next is zero, nothing: every attempt is used (the message is
// dead-lettered).
type Step struct {
	// Wait is how long to wait before the next attempt (zero when exhausted).
	Wait time.Duration
	// Next is the number of the next attempt (k+1), zero when exhausted.
	Next int
	// InProcess says the wait is short enough to wait in the consumer
	// ([Policy.InProcess]); false for a broker rung, and when exhausted.
	InProcess bool
}

// String names the step as docs/contract.md and the conformance vectors
// do: "exhausted", "in-process" or "broker".
func (s Step) String() string {
	switch {
	case s.Next == 0:
		return "exhausted"
	case s.InProcess:
		return "in-process"
	default:
		return "broker"
	}
}

// After says what to do once attempt failed (attempts count from 1). An
// attempt below 1 is read as 1; an attempt at or past Attempts() — a message
// that arrived already tried more often than this policy allows — is
// exhausted.
func (p Policy) After(attempt int) Step {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > len(p.waits) {
		return Step{}
	}
	w := p.waits[attempt-1]
	return Step{Wait: w, Next: attempt + 1, InProcess: p.InProcess(w)}
}

// Validate reports every problem with the policy, each wrapping [ErrInvalid]:
// bad constructor input, broker rungs that are not a whole number of
// seconds (a rung's name and TTL are per whole second, so two such rungs
// would share a queue name with different TTLs), and broker rungs longer
// than the longest message TTL RabbitMQ accepts (2^32-1 ms, about 49.7
// days).
func (p Policy) Validate() error {
	errs := []error{}
	if p.err != nil {
		errs = append(errs, p.err)
	}
	for _, r := range p.BrokerRungs() {
		if r%time.Second != 0 {
			errs = append(errs, fmt.Errorf("broker wait %v is not a whole number of seconds (in-process limit %v)", r, p.InProcessLimit()))
		}
		if r > maxBrokerWait {
			errs = append(errs, fmt.Errorf("broker wait %v is longer than the broker's longest message TTL (%v)", r, maxBrokerWait))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &invalidError{errors.Join(errs...)}
}

type invalidError struct{ err error }

func (e *invalidError) Error() string   { return "retry: invalid policy: " + e.err.Error() }
func (e *invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

// Equal reports whether p and q retry the same way: the same schedule and the
// same in-process limit, with broker waits in the same kind of rung.
func (p Policy) Equal(q Policy) bool {
	return slices.Equal(p.waits, q.waits) && p.InProcessLimit() == q.InProcessLimit() &&
		p.durable == q.durable &&
		(p.err == nil) == (q.err == nil)
}

// String describes the policy, e.g. "6 attempts, waits [10s 20s 40s 1m20s 2m40s], in-process up to 30s".
func (p Policy) String() string {
	var b strings.Builder
	if n := p.Attempts(); n == 1 {
		b.WriteString("1 attempt")
	} else {
		fmt.Fprintf(&b, "%d attempts", n)
	}
	if len(p.waits) > 0 {
		fmt.Fprintf(&b, ", waits %v", p.waits)
	}
	fmt.Fprintf(&b, ", in-process up to %v", p.InProcessLimit())
	if p.durable {
		b.WriteString(", durable rungs")
	}
	if p.err != nil {
		b.WriteString(" (invalid)")
	}
	return b.String()
}
