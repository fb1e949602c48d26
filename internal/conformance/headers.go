package conformance

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Attempts is attempt.json.
type Attempts struct {
	About     string `json:"about"`
	Header    string `json:"header"`
	WrittenAs string `json:"written_as"`
	Cases     []struct {
		Name    string `json:"name"`
		Value   Typed  `json:"value,omitempty"` // absent: no header
		Attempt int    `json:"attempt"`
	} `json:"cases"`
}

// CheckAttempts runs attempt.json against read, the library's reader of
// the attempt header (mq.AttemptOf).
func CheckAttempts(v Attempts, read func(amqp.Table) int) []string {
	var out []string
	if len(v.Cases) == 0 {
		return []string{"attempt: the vector has no cases"}
	}
	for _, c := range v.Cases {
		h := amqp.Table{"x-other": "x"}
		if c.Value != nil {
			val, err := Decode(c.Value, nil)
			if err != nil {
				out = append(out, fmt.Sprintf("attempt %q: %v", c.Name, err))
				continue
			}
			h[v.Header] = val
		}
		if got := read(h); got != c.Attempt {
			out = append(out, fmt.Sprintf("attempt %q: %s = %s reads %d, the vector says %d", c.Name, v.Header, Canon(h[v.Header]), got, c.Attempt))
		}
	}
	return out
}

// Expect is what a vector says about one header of a republished copy.
type Expect struct {
	// Is: present with exactly this AMQP type and value.
	Is Typed `json:"is,omitempty"`
	// Kept: present exactly as the incoming message had it.
	Kept bool `json:"kept,omitempty"`
	// Absent: not there.
	Absent bool `json:"absent,omitempty"`
	// Optional: a Go extension; if there, as shown.
	Optional Typed `json:"optional,omitempty"`
	// Fresh, with Optional: if there, not the incoming value (a stale copy
	// would point at the wrong hop).
	Fresh bool `json:"fresh,omitempty"`
}

// HeaderCase is the part of a hops.json or replay.json case that says what
// the copy carries.
type HeaderCase struct {
	Name       string            `json:"name"`
	Incoming   map[string]Typed  `json:"incoming"`
	Target     string            `json:"target"`
	OnlyListed bool              `json:"only_listed"`
	Headers    map[string]Expect `json:"headers"`
}

// HopCase is one case of hops.json.
type HopCase struct {
	HeaderCase
	Policy PolicySpec `json:"policy"`
	// RungsDeclared false: the consumer's broker rungs do not exist.
	RungsDeclared *bool  `json:"rungs_declared,omitempty"`
	Handler       string `json:"handler"` // fail, park or reject
	Error         string `json:"error"`
	// Tracing replaces expectations when the library has tracing
	// installed (traceparent is written only then).
	Tracing map[string]Expect `json:"with_tracing,omitempty"`
}

// Traced is the case as a library with tracing installed must meet it.
func (c HopCase) Traced() HeaderCase {
	hc := c.HeaderCase
	hc.Headers = make(map[string]Expect, len(c.Headers)+len(c.Tracing))
	for k, e := range c.Headers {
		hc.Headers[k] = e
	}
	for k, e := range c.Tracing {
		hc.Headers[k] = e
	}
	return hc
}

// Hops is hops.json.
type Hops struct {
	About string `json:"about"`
	// BrokerAdded are headers the broker itself may add to a copy.
	BrokerAdded []string  `json:"broker_added"`
	Cases       []HopCase `json:"cases"`
}

// ReplayCase is one case of replay.json.
type ReplayCase struct {
	HeaderCase
	From string `json:"from"`
}

// Replays is replay.json.
type Replays struct {
	About       string       `json:"about"`
	BrokerAdded []string     `json:"broker_added"`
	Cases       []ReplayCase `json:"cases"`
}

// Window is when the hop happened: a {now} timestamp must fall in it,
// widened to whole seconds (AMQP timestamps are seconds).
type Window struct{ From, To time.Time }

func (w Window) holds(t time.Time) bool {
	return !t.Before(w.From.Truncate(time.Second)) && !t.After(w.To.Truncate(time.Second).Add(time.Second))
}

var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// Run is what a hop or replay did, as a test captured it.
type Run struct {
	// Vars fill the case's placeholders.
	Vars Vars
	// Window is when it happened.
	Window Window
	// Incoming is the headers of the message as the library received it
	// before the hop: a kept header must still be this. Nil: the case's own
	// incoming headers.
	Incoming amqp.Table
	// Got is the headers of the copy in the target queue.
	Got amqp.Table
	// BrokerAdded are headers the broker writes itself (x-delivery-count,
	// x-death, …): not the library's, so not checked.
	BrokerAdded []string
}

// CheckHeaders compares the headers of a republished copy with a case.
func CheckHeaders(c HeaderCase, r Run) []string {
	var out []string
	fail := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("%q: ", c.Name)+fmt.Sprintf(format, args...))
	}
	vars, w, got, incoming := r.Vars, r.Window, r.Got, r.Incoming
	if incoming == nil {
		var err error
		if incoming, err = DecodeTable(c.Incoming, vars); err != nil {
			fail("incoming: %v", err)
			return out
		}
	}
	if len(c.Headers) == 0 {
		fail("the case lists no headers")
	}
	keys := make([]string, 0, len(c.Headers))
	for k := range c.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e := c.Headers[k]
		v, present := got[k]
		n := 0
		for _, set := range []bool{e.Is != nil, e.Kept, e.Absent, e.Optional != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			fail("%s: say exactly one of is, kept, absent, optional", k)
			continue
		}
		switch {
		case e.Absent:
			if present {
				fail("%s is %s, the vector says it is absent", k, Canon(v))
			}
		case e.Kept:
			in, had := incoming[k]
			switch {
			case !had:
				fail("%s: kept, but the incoming message has no such header", k)
			case !present:
				fail("%s is missing, the vector says it is kept as %s", k, Canon(in))
			case Canon(v) != Canon(in):
				fail("%s is %s, the vector says it is kept as %s", k, Canon(v), Canon(in))
			}
		case e.Is != nil:
			if !present {
				fail("%s is missing, the vector says %s", k, e.Is)
				continue
			}
			if msg := match(e.Is, vars, w, v); msg != "" {
				fail("%s %s", k, msg)
			}
		case e.Optional != nil:
			if !present {
				continue
			}
			if msg := match(e.Optional, vars, w, v); msg != "" {
				fail("%s (optional) %s", k, msg)
			}
			if in, had := incoming[k]; e.Fresh && had && Canon(in) == Canon(v) {
				fail("%s (optional) is the incoming %s again: written, it must be the hop's own", k, Canon(v))
			}
		}
	}
	if c.OnlyListed {
		for k, v := range got {
			if _, listed := c.Headers[k]; !listed && !slices.Contains(r.BrokerAdded, k) {
				fail("%s = %s is on the copy, and the vector lists no such header", k, Canon(v))
			}
		}
	}
	return out
}

// match compares v with a typed expectation, placeholders filled: "" when
// they agree.
func match(want Typed, vars Vars, w Window, v any) string {
	typ, raw, err := split(want)
	if err != nil {
		return err.Error()
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch {
		case typ == "timestamp" && s == "{now}":
			t, ok := v.(time.Time)
			if !ok || !w.holds(t) {
				return fmt.Sprintf("is %s, the vector says a timestamp between %s and %s", Canon(v), w.From.UTC().Format(time.RFC3339), w.To.UTC().Format(time.RFC3339))
			}
			return ""
		case typ == "longstr" && s == "{traceparent}":
			if x, ok := v.(string); !ok || !traceparentRE.MatchString(x) {
				return fmt.Sprintf("is %s, the vector says a longstr holding a W3C traceparent", Canon(v))
			}
			return ""
		}
	}
	wv, err := Decode(want, vars)
	if err != nil {
		return err.Error()
	}
	if Canon(v) != Canon(wv) {
		return fmt.Sprintf("is %s, the vector says %s", Canon(v), Canon(wv))
	}
	return ""
}
