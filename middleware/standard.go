package middleware

import (
	"time"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/retry"
)

// StandardOption adjusts the Standard stack.
type StandardOption interface{ applyStandard(*standard) }

type standardOption func(*standard)

func (f standardOption) applyStandard(s *standard) { f(s) }

type standard struct {
	declare  bool
	timeout  time.Duration
	classify []Classifier
}

// WithoutDeclare leaves DeclareOnStart out (declare=false): the consumer
// declares nothing, and everything it publishes to must be declared by
// somebody else.
func WithoutDeclare() StandardOption {
	return standardOption(func(s *standard) { s.declare = false })
}

// WithTimeout adds Timeout(d) around each attempt (default: none).
func WithTimeout(d time.Duration) StandardOption {
	return standardOption(func(s *standard) { s.timeout = d })
}

// WithClassifier adds classifiers to Parking.
func WithClassifier(c ...Classifier) StandardOption {
	return standardOption(func(s *standard) { s.classify = append(s.classify, c...) })
}

// Standard is the stack for the common case, in the order that works, so
// nobody has to learn it (outermost first):
//
//	DeclareOnStart  declares the failure half for p before every (re)subscribe
//	Logging         one record per delivery, after the outcome is known
//	RetryLadder(p)  in-process waits, broker rungs, .dlq when exhausted
//	Parking         Park → .parked, Reject → .dlq, once, never retried
//	Recover         a panic becomes an error the ladder retries
//	Timeout         (WithTimeout) a deadline per attempt
//
// Parking sits inside the ladder so a parked or rejected message is set
// aside on the attempt that failed, and Recover inside both so a panic is an
// ordinary failure. Middleware added after Standard with mq.WithMiddleware
// sits inside all of these, next to the handler.
func Standard(p retry.Policy, opts ...StandardOption) mq.ConsumerOption {
	return mq.WithMiddleware(standardStack(p, opts)...)
}

// StandardDeclared is Standard with the retry policy the Broker declared
// for the consumed queue (topology.Retry), so the policy is written once,
// with the queue:
//
//	b.Declare(ctx, topology.New().Queue("orders.new", topology.DeadLetter(), topology.Retry(policy)))
//	b.Consume(ctx, "orders.new", h, middleware.StandardDeclared())
//
// Broker.Consume gives the ladder that policy, and
// refuses the consumer, mq.ErrInvalid, when the Broker declared the queue
// with no policy (or not at all). A queue another service declares needs
// Standard(policy); so does a consumer outside a Broker (mqtest).
func StandardDeclared(opts ...StandardOption) mq.ConsumerOption {
	return mq.WithMiddleware(stack(func() mq.Middleware {
		return func(next mq.Handler) mq.Handler { return &declaredLadder{ladder{next: &recoverer{next}}} }
	}, opts)...)
}

// Stack is Standard's middleware as a list, outermost first, for wrapping
// a handler outside a consumer: mq.Chain(h, middleware.Stack(p)...) is
// the chain Standard(p) gives a consumer without the consumer's part (its
// attempt counting, and its carrying out of each decision: a decision
// comes back as the error; mqtest.New runs the whole of it). Each element
// is a separate middleware, so each keeps its Subscribe hook when given to
// mq.WithMiddleware.
func Stack(p retry.Policy, opts ...StandardOption) []mq.Middleware {
	return standardStack(p, opts)
}

// standardStack is Standard's middleware, outermost first.
func standardStack(p retry.Policy, opts []StandardOption) []mq.Middleware {
	return stack(func() mq.Middleware { return RetryLadder(p) }, opts)
}

// stack is the Standard stack around the ladder newLadder builds.
func stack(newLadder func() mq.Middleware, opts []StandardOption) []mq.Middleware {
	s := standard{declare: true}
	for _, o := range opts {
		if o != nil {
			o.applyStandard(&s)
		}
	}
	var mws []mq.Middleware
	if s.declare {
		mws = append(mws, DeclareOnStart())
	}
	mws = append(mws, Logging(), newLadder(), Parking(s.classify...), Recover())
	if s.timeout > 0 {
		mws = append(mws, Timeout(s.timeout))
	}
	return mws
}
