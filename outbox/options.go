package outbox

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"

	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Option is any option of this package. Each constructor takes its own
// type (OutboxOption for New, RelayOption for NewRelay, InboxOption for
// Inbox), so an option given to a constructor it does not apply to is a
// compile error; an option that applies to several (WithSchema,
// WithMeterProvider, …) is of each of their types. Module takes every Option and
// gives each to the constructors it applies to. Options are values of
// interfaces with unexported methods, so only this package defines them.
type Option interface{ option() }

// OutboxOption configures an Outbox (New): WithSchema, WithPropagators,
// OrderBy, WithNotify, WithoutNotify.
type OutboxOption interface {
	Option
	applyOutbox(*config)
}

// RelayOption configures a Relay (NewRelay): WithSchema,
// WithMeterProvider, WithPropagators, PollInterval, BatchSize,
// MaxAttempts, PublishTimeout, WithTopology, WithPublisherOptions.
type RelayOption interface {
	Option
	applyRelay(*config)
}

// InboxOption configures an Inbox: WithSchema, WithMeterProvider, KeyBy,
// Retention.
type InboxOption interface {
	Option
	applyInbox(*config)
}

// SchemaOption is WithSchema's type: an option of New, NewRelay and Inbox
// alike, since all three must name the same tables.
type SchemaOption interface {
	OutboxOption
	RelayOption
	InboxOption
}

// RelayInboxOption is an option of NewRelay and Inbox both
// (WithMeterProvider).
type RelayInboxOption interface {
	RelayOption
	InboxOption
}

// OutboxRelayOption is an option of New and NewRelay both
// (WithPropagators: the Outbox writes the trace context, the Relay reads
// it back).
type OutboxRelayOption interface {
	OutboxOption
	RelayOption
}

// The concrete options, one type per set of constructors.
type (
	outboxOpt      func(*config)
	relayOpt       func(*config)
	inboxOpt       func(*config)
	schemaOpt      func(*config)
	relayInboxOpt  func(*config)
	outboxRelayOpt func(*config)
)

func (outboxOpt) option()                      {}
func (f outboxOpt) applyOutbox(c *config)      { f(c) }
func (relayOpt) option()                       {}
func (f relayOpt) applyRelay(c *config)        { f(c) }
func (inboxOpt) option()                       {}
func (f inboxOpt) applyInbox(c *config)        { f(c) }
func (schemaOpt) option()                      {}
func (f schemaOpt) applyOutbox(c *config)      { f(c) }
func (f schemaOpt) applyRelay(c *config)       { f(c) }
func (f schemaOpt) applyInbox(c *config)       { f(c) }
func (relayInboxOpt) option()                  {}
func (f relayInboxOpt) applyRelay(c *config)   { f(c) }
func (f relayInboxOpt) applyInbox(c *config)   { f(c) }
func (outboxRelayOpt) option()                 {}
func (f outboxRelayOpt) applyOutbox(c *config) { f(c) }
func (f outboxRelayOpt) applyRelay(c *config)  { f(c) }

type config struct {
	schema      Schema
	mp          metric.MeterProvider
	prop        propagation.TextMapPropagator
	orderBy     func(exchange, routingKey string, m *mq.Message) string
	poll        time.Duration
	batch       int
	maxAttempts int
	timeout     time.Duration
	keyBy       func(d *mq.Delivery) string
	retention   time.Duration
	pubOpts     []mq.PublisherOption
	topo        *topology.Topology
	noNotify    bool
}

// only is the options in opts that are Os: those of the constructor that
// takes Os, for Module to give it.
func only[O Option](opts []Option) []O {
	var out []O
	for _, o := range opts {
		if o, ok := o.(O); ok {
			out = append(out, o)
		}
	}
	return out
}

// newConfig is the defaults with opts applied by apply (a constructor's
// own method of its option type), then the globals for what none set.
func newConfig[O Option](opts []O, apply func(O, *config)) config {
	c := config{poll: time.Second, batch: 200, noNotify: true, maxAttempts: 10, timeout: 30 * time.Second, retention: 7 * 24 * time.Hour}
	for _, o := range opts {
		if Option(o) != nil {
			apply(o, &c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
		if len(c.prop.Fields()) == 0 { // nothing set: the global propagates nothing
			c.prop = propagation.TraceContext{}
		}
	}
	return c
}

// WithSchema names the tables, for the Outbox, the Relay and the Inbox
// (give all three the same; Module gives one to all three). Default: the
// zero Schema (DefaultOutboxTable, DefaultInboxTable).
func WithSchema(s Schema) SchemaOption { return schemaOpt(func(c *config) { c.schema = s }) }

// WithMeterProvider sets the MeterProvider the Relay's and the Inbox's
// instruments are created with. Default: the global one
// (otel.GetMeterProvider), read when NewRelay or Inbox runs. A nil provider
// keeps the default.
func WithMeterProvider(mp metric.MeterProvider) RelayInboxOption {
	return relayInboxOpt(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}

// WithPropagators sets the propagator the Outbox writes the caller's trace
// context with and the Relay reads it back with. Default: the global one
// (otel.GetTextMapPropagator) when one has been set, else W3C trace
// context, as otelmq does. A nil propagator keeps the default.
func WithPropagators(p propagation.TextMapPropagator) OutboxRelayOption {
	return outboxRelayOpt(func(c *config) {
		if p != nil {
			c.prop = p
		}
	})
}

// OrderBy gives each row an ordering key (Outbox): rows with one key are
// published in order (see the package doc for exactly what is promised),
// rows with different keys in parallel. f gets the exchange, the routing
// key and the message about to be written; "" means no order for that
// row. Any string is a key: one over 2048 bytes, or not UTF-8 text, is
// stored by its SHA-256 (its index could not hold it). Default: no
// ordering key, every row in parallel. To keep the order
// per routing key: OrderBy(func(_, key string, _ *mq.Message) string {
// return key }) — then one routing key is one sequence, sent one confirm
// at a time.
func OrderBy(f func(exchange, routingKey string, m *mq.Message) string) OutboxOption {
	return outboxOpt(func(c *config) { c.orderBy = f })
}

// WithNotify makes the Outbox's writes send a NOTIFY that PostgreSQL
// delivers to the relays' LISTEN at commit. Off by default: PostgreSQL
// serialises the commits of transactions that sent a NOTIFY (it holds a
// database-wide lock from the notification until the commit is on disk),
// measured at 0.43 – 0.76x the transactions per second of plain ones with 8
// concurrent writers on this project's machine (make bench-outbox), and
// the relay finds new rows within milliseconds without it (it looks at
// the table's newest row every 1 – 5 ms). For services with few writers
// whose relays look rarely (a long PollInterval).
func WithNotify() OutboxOption { return outboxOpt(func(c *config) { c.noNotify = false }) }

// WithoutNotify makes the Outbox write rows without a NOTIFY: the default
// (see WithNotify); it undoes a WithNotify given before it.
func WithoutNotify() OutboxOption { return outboxOpt(func(c *config) { c.noNotify = true }) }

// PollInterval is how often the Relay claims from the table when nothing
// woke it (for rows whose retry is due, rows committed out of id order).
// Between those claims it looks at the table's newest pending row every
// 1 to 5 ms (never less often than PollInterval) and claims when it
// changed, and a NOTIFY (WithNotify) wakes it at once. Default 1 s.
func PollInterval(d time.Duration) RelayOption {
	return relayOpt(func(c *config) {
		if d > 0 {
			c.poll = d
		}
	})
}

// BatchSize is how many rows the Relay claims at once. Default 200.
func BatchSize(n int) RelayOption {
	return relayOpt(func(c *config) {
		if n > 0 {
			c.batch = n
		}
	})
}

// MaxAttempts is how many times the Relay offers a row the broker refuses
// (nack, unroutable, a missing exchange) before setting it aside; the
// waits between grow from 1 s, doubling, to at most 10 min. A message the
// wire cannot carry (mq.ErrInvalid) or the broker refuses for itself with
// 406 PRECONDITION_FAILED (a body over its max_message_size, say) is set
// aside at once. Default 10.
func MaxAttempts(n int) RelayOption {
	return relayOpt(func(c *config) {
		if n > 0 {
			c.maxAttempts = n
		}
	})
}

// PublishTimeout bounds one batch of the Relay: its publishes and its
// transaction. A batch that runs out (the broker does not answer) leaves
// its rows as they were, unattempted, and the relay tries again later.
// The database enforces the bound too: the batch's transaction runs with
// idle_in_transaction_session_timeout and statement_timeout set to it, so
// the rows of a relay that freezes (SIGSTOP, a paused container, a
// partition) are freed by the server after about this long, for the other
// relays. Stopping the relay lets the batch in flight finish within this
// bound. Default 30 s.
func PublishTimeout(d time.Duration) RelayOption {
	return relayOpt(func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	})
}

// WithTopology tells the Relay the kinds of the exchanges it publishes to,
// from t, the topology the app declares, so that each row follows the rule
// fxmodule.AsPublisher follows: a row to an exchange t declares as a
// topic, fanout or headers exchange is an event, published without the
// mandatory flag, so one no queue is bound for is dropped by the broker
// (its row deleted) rather than refused; a row to any other exchange (the
// default exchange, a direct one, one t does not declare: an exchange
// declared by someone else, whose kind a client cannot learn) is a
// command, mandatory, refused when unroutable, tried again and set aside.
// Module gives the app's topology (every fxmodule.AsTopology fragment)
// without being asked. Default: no topology, every row a command.
func WithTopology(t *topology.Topology) RelayOption {
	return relayOpt(func(c *config) { c.topo = t })
}

// WithPublisherOptions are given to every mq.Publisher the Relay opens
// (one per exchange, at most 64 at once), after those WithTopology's rule
// gives (so mq.AllowUnroutable() here makes every row an event, and
// mq.Mandatory() every row a command). Default none.
func WithPublisherOptions(opts ...mq.PublisherOption) RelayOption {
	return relayOpt(func(c *config) { c.pubOpts = append(c.pubOpts, opts...) })
}

// KeyBy sets the Inbox's key of a delivery: what makes two deliveries the
// same message. "" refuses the delivery (ErrNoKey). Default: the message
// id. Keys are per queue: one key on two queues is two records.
func KeyBy(f func(d *mq.Delivery) string) InboxOption {
	return inboxOpt(func(c *config) { c.keyBy = f })
}

// Retention is how long the Inbox keeps a record: a duplicate arriving
// later than this is handled again. Cleaning runs at most once a minute,
// on a delivery's way through. Default 7 days.
func Retention(d time.Duration) InboxOption {
	return inboxOpt(func(c *config) {
		if d > 0 {
			c.retention = d
		}
	})
}
