package conformance

import (
	"fmt"
	"slices"
	"time"

	"github.com/acemq/acemq-go/retry"
	"github.com/acemq/acemq-go/topology"
)

// Names is names.json.
type Names struct {
	About     string `json:"about"`
	Constants struct {
		DeadLetterSuffix   string `json:"dead_letter_suffix"`
		ParkedSuffix       string `json:"parked_suffix"`
		RetrySegment       string `json:"retry_segment"`
		RetryExchange      string `json:"retry_exchange"`
		DeadLetterExchange string `json:"dead_letter_exchange"`
		QuorumQueueType    string `json:"quorum_queue_type"`
	} `json:"constants"`
	Short []struct {
		Ms    int64  `json:"ms"`
		Short string `json:"short"`
	} `json:"short"`
	Queues []struct {
		Queue      string `json:"queue"`
		DeadLetter string `json:"dead_letter"`
		Parked     string `json:"parked"`
		Rungs      []struct {
			Ms   int64  `json:"ms"`
			Name string `json:"name"`
		} `json:"rungs"`
	} `json:"queues"`
}

// CheckNames runs names.json against package topology.
func CheckNames(v Names) []string {
	var out []string
	eq := func(what, got, want string) {
		if got != want {
			out = append(out, fmt.Sprintf("names: %s is %q, the vector says %q", what, got, want))
		}
	}
	c := v.Constants
	eq("the dead-letter suffix", topology.DeadLetterSuffix, c.DeadLetterSuffix)
	eq("the parked suffix", topology.ParkedSuffix, c.ParkedSuffix)
	eq("the retry segment", topology.RetrySegment, c.RetrySegment)
	eq("the retry exchange", topology.RetryExchange, c.RetryExchange)
	eq("the dead-letter exchange", topology.DeadLetterExchange, c.DeadLetterExchange)
	eq("the quorum queue type", topology.QueueTypeQuorum, c.QuorumQueueType)
	if len(v.Short) == 0 || len(v.Queues) == 0 {
		out = append(out, "names: the vector has no short() cases or no queues")
	}
	for _, s := range v.Short {
		eq(fmt.Sprintf("short(%d ms)", s.Ms), topology.Short(ms(s.Ms)), s.Short)
	}
	for _, q := range v.Queues {
		eq("the dead-letter queue of "+q.Queue, topology.DeadLetterQueue(q.Queue), q.DeadLetter)
		eq("the parked queue of "+q.Queue, topology.ParkedQueue(q.Queue), q.Parked)
		for _, r := range q.Rungs {
			eq(fmt.Sprintf("the %d ms rung of %s", r.Ms, q.Queue), topology.RungQueue(q.Queue, ms(r.Ms)), r.Name)
		}
	}
	return out
}

// PolicySpec is a policy as the vectors write it.
type PolicySpec struct {
	Kind             string  `json:"kind"` // exponential, fixed or waits
	Attempts         int     `json:"attempts,omitempty"`
	FirstMs          *int64  `json:"first_ms,omitempty"`
	WaitMs           *int64  `json:"wait_ms,omitempty"`
	WaitsMs          []int64 `json:"waits_ms,omitempty"`
	InProcessLimitMs *int64  `json:"in_process_limit_ms,omitempty"`
}

// Policy builds the Go policy. A spec the runner cannot read (an unknown
// kind, a missing field) is an error, never a zero policy.
func (s PolicySpec) Policy() (retry.Policy, error) {
	var opts []retry.Option
	if s.InProcessLimitMs != nil {
		opts = append(opts, retry.InProcessLimit(ms(*s.InProcessLimitMs)))
	}
	switch s.Kind {
	case "exponential":
		if s.FirstMs == nil {
			return retry.Policy{}, fmt.Errorf("exponential policy without first_ms")
		}
		return retry.Exponential(s.Attempts, ms(*s.FirstMs), opts...), nil
	case "fixed":
		if s.WaitMs == nil {
			return retry.Policy{}, fmt.Errorf("fixed policy without wait_ms")
		}
		return retry.Fixed(s.Attempts, ms(*s.WaitMs), opts...), nil
	case "waits":
		w := make([]time.Duration, len(s.WaitsMs))
		for i, n := range s.WaitsMs {
			w[i] = ms(n)
		}
		return retry.Waits(w...).With(opts...), nil
	}
	return retry.Policy{}, fmt.Errorf("unknown policy kind %q", s.Kind)
}

// Policies is policies.json.
type Policies struct {
	About                   string `json:"about"`
	DefaultInProcessLimitMs int64  `json:"default_in_process_limit_ms"`
	Valid                   []struct {
		Name             string     `json:"name"`
		Policy           PolicySpec `json:"policy"`
		Attempts         int        `json:"attempts"`
		ScheduleMs       []int64    `json:"schedule_ms"`
		BrokerRungsMs    []int64    `json:"broker_rungs_ms"`
		InProcessLimitMs int64      `json:"in_process_limit_ms"`
		After            []struct {
			Attempt int    `json:"attempt"`
			Action  string `json:"action"`
			WaitMs  int64  `json:"wait_ms"`
			Next    int    `json:"next"`
		} `json:"after"`
	} `json:"valid"`
	Invalid []struct {
		Name   string     `json:"name"`
		Rule   string     `json:"rule"`
		Policy PolicySpec `json:"policy"`
	} `json:"invalid"`
}

func msList(ds []time.Duration) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Milliseconds()
	}
	return out
}

// CheckPolicies runs policies.json against package retry.
func CheckPolicies(v Policies) []string {
	var out []string
	fail := func(name, format string, args ...any) {
		out = append(out, "policy "+fmt.Sprintf("%q", name)+": "+fmt.Sprintf(format, args...))
	}
	if got := retry.DefaultInProcessLimit.Milliseconds(); got != v.DefaultInProcessLimitMs {
		fail("default", "the default in-process limit is %d ms, the vector says %d", got, v.DefaultInProcessLimitMs)
	}
	if len(v.Valid) == 0 || len(v.Invalid) == 0 {
		out = append(out, "policies: the vector has no valid or no invalid cases")
	}
	for _, c := range v.Valid {
		p, err := c.Policy.Policy()
		if err != nil {
			fail(c.Name, "%v", err)
			continue
		}
		if err := p.Validate(); err != nil {
			fail(c.Name, "refused: %v", err)
			continue
		}
		if got := p.Attempts(); got != c.Attempts {
			fail(c.Name, "attempts %d, want %d", got, c.Attempts)
		}
		if got := msList(p.Schedule()); !slices.Equal(got, c.ScheduleMs) {
			fail(c.Name, "schedule %v ms, want %v", got, c.ScheduleMs)
		}
		if got := msList(p.BrokerRungs()); !slices.Equal(got, c.BrokerRungsMs) {
			fail(c.Name, "broker rungs %v ms, want %v", got, c.BrokerRungsMs)
		}
		if got := p.InProcessLimit().Milliseconds(); got != c.InProcessLimitMs {
			fail(c.Name, "in-process limit %d ms, want %d", got, c.InProcessLimitMs)
		}
		if len(c.After) == 0 {
			fail(c.Name, "the vector has no after steps")
		}
		for _, a := range c.After {
			st := p.After(a.Attempt)
			got := fmt.Sprintf("%s wait %d ms next %d", st, st.Wait.Milliseconds(), st.Next)
			want := fmt.Sprintf("%s wait %d ms next %d", a.Action, a.WaitMs, a.Next)
			if got != want {
				fail(c.Name, "after attempt %d: %s, want %s", a.Attempt, got, want)
			}
		}
	}
	for _, c := range v.Invalid {
		p, err := c.Policy.Policy()
		if err != nil {
			fail(c.Name, "%v", err)
			continue
		}
		if p.Validate() == nil {
			fail(c.Name, "accepted, the vector says it is refused (%s)", c.Rule)
		}
	}
	return out
}
