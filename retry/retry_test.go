package retry_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/retry"
)

const s = time.Second

func durs(ds ...time.Duration) []time.Duration { return ds }

func TestPolicies(t *testing.T) {
	tests := []struct {
		name     string
		p        retry.Policy
		attempts int
		schedule []time.Duration
		rungs    []time.Duration
		limit    time.Duration
	}{
		// The rest of the policy arithmetic is conformance/policies.json
		// (TestConformancePolicies); these are Go's own spellings.
		{"zero policy", retry.Policy{}, 1, nil, nil, 30 * s},
		{"explicit default limit", retry.Fixed(2, 30*s, retry.InProcessLimit(retry.DefaultInProcessLimit)), 2, durs(30 * s), nil, 30 * s},
		{"nil option ignored", retry.Fixed(2, 40*s, nil), 2, durs(40 * s), durs(40 * s), 30 * s},
		{"With adds an option", retry.Waits(5*s, 10*s).With(retry.InProcessLimit(5 * s)), 3, durs(5*s, 10*s), durs(10 * s), 5 * s},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if got := tc.p.Attempts(); got != tc.attempts {
				t.Errorf("Attempts() = %d, want %d", got, tc.attempts)
			}
			if got := tc.p.Schedule(); len(got) != tc.attempts-1 || !slices.Equal(got, tc.schedule) {
				t.Errorf("Schedule() = %v, want %v (attempts-1 = %d entries)", got, tc.schedule, tc.attempts-1)
			}
			if got := tc.p.BrokerRungs(); !slices.Equal(got, tc.rungs) {
				t.Errorf("BrokerRungs() = %v, want %v", got, tc.rungs)
			}
			if got := tc.p.InProcessLimit(); got != tc.limit {
				t.Errorf("InProcessLimit() = %v, want %v", got, tc.limit)
			}
			for _, w := range tc.p.Schedule() {
				if in := tc.p.InProcess(w); in != (w <= tc.limit) {
					t.Errorf("InProcess(%v) = %v with limit %v", w, in, tc.limit)
				}
			}
			for _, r := range tc.p.BrokerRungs() {
				if r <= tc.limit {
					t.Errorf("broker rung %v is not longer than the in-process limit %v", r, tc.limit)
				}
			}
		})
	}
}

// TestInProcessBoundary pins the limit's edge below the vectors'
// millisecond resolution: a nanosecond over is the broker's.
func TestInProcessBoundary(t *testing.T) {
	p := retry.Policy{}
	if !p.InProcess(30*s) || p.InProcess(30*s+time.Nanosecond) {
		t.Error("the default limit is 30s inclusive, to the nanosecond")
	}
	p = p.With(retry.InProcessLimit(0))
	if !p.InProcess(0) || p.InProcess(time.Nanosecond) {
		t.Error("with InProcessLimit(0) only a zero wait is in-process")
	}
}

// TestAfter pins what conformance/policies.json does not say: Go reads an
// attempt below 1 as 1.
func TestAfter(t *testing.T) {
	p := retry.Exponential(6, 10*s) // waits 10s 20s 40s 80s 160s
	for _, k := range []int{-5, 0} {
		if got, want := p.After(k), (retry.Step{InProcess: true, Wait: 10 * s, Next: 2}); got != want {
			t.Errorf("After(%d) = %+v, want %+v", k, got, want)
		}
	}
}

func TestAfterZeroPolicy(t *testing.T) {
	var p retry.Policy
	for _, k := range []int{-1, 0, 1, 2} {
		if got := p.After(k); got != (retry.Step{}) {
			t.Errorf("zero Policy: After(%d) = %+v, want exhausted", k, got)
		}
	}
}

func TestStepString(t *testing.T) {
	for st, want := range map[retry.Step]string{
		{}:                                  "exhausted",
		{Wait: s, Next: 2, InProcess: true}: "in-process",
		{Wait: s, Next: 2}:                  "broker",
	} {
		if got := st.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", st, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    retry.Policy
		want []string // substrings of the error
		// ctor: the constructor itself was given bad input, so String
		// marks the policy invalid.
		ctor bool
	}{
		{"exponential attempts 0", retry.Exponential(0, 10*s), []string{"retry.Exponential(0, 10s)", "at least 1"}, true},
		{"exponential attempts negative", retry.Exponential(-3, 10*s), []string{"retry.Exponential(-3, 10s)", "at least 1"}, true},
		{"exponential attempts over max", retry.Exponential(retry.MaxAttempts+1, s), []string{"at most 1000"}, true},
		{"exponential negative first", retry.Exponential(3, -s), []string{"retry.Exponential(3, -1s)", "negative"}, true},
		{"exponential overflow", retry.Exponential(100, time.Hour, retry.InProcessLimit(1<<62)), []string{"overflows"}, true},
		{"fixed attempts 0", retry.Fixed(0, s), []string{"retry.Fixed(0, 1s)", "at least 1"}, true},
		{"fixed attempts over max", retry.Fixed(retry.MaxAttempts+1, s), []string{"retry.Fixed(1001, 1s)", "at most 1000"}, true},
		{"fixed negative wait", retry.Fixed(3, -s), []string{"retry.Fixed(3, -1s)", "negative"}, true},
		{"waits negative", retry.Waits(s, -2*s), []string{"retry.Waits", "wait 2 (-2s)", "negative"}, true},
		{"waits too many", retry.Waits(make([]time.Duration, retry.MaxAttempts)...), []string{"retry.Waits", "1000 waits"}, true},
		{"negative limit", retry.Fixed(2, s, retry.InProcessLimit(-s)), []string{"InProcessLimit(-1s)", "negative"}, true},
		{"broker rung not whole seconds", retry.Waits(1500 * time.Millisecond).With(retry.InProcessLimit(0)),
			[]string{"broker wait 1.5s", "whole number of seconds"}, false},
		{"broker rung under a second", retry.Fixed(2, 500*time.Millisecond, retry.InProcessLimit(0)),
			[]string{"broker wait 500ms", "whole number of seconds"}, false},
		{"broker rung over the broker's longest TTL", retry.Fixed(2, 50*24*time.Hour),
			[]string{"broker wait 1200h0m0s", "longest message TTL"}, false},
		{"broker rung 1s over the broker's longest TTL", retry.Fixed(2, 4294968*s),
			[]string{"longest message TTL"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tc.want)
			}
			if !errors.Is(err, retry.ErrInvalid) {
				t.Errorf("errors.Is(%v, retry.ErrInvalid) = false", err)
			}
			if !strings.HasPrefix(err.Error(), "retry: invalid policy: ") {
				t.Errorf("error %q does not start with the package prefix", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if got := strings.HasSuffix(tc.p.String(), " (invalid)"); got != tc.ctor {
				t.Errorf("String() = %q: marked invalid = %v, want %v", tc.p.String(), got, tc.ctor)
			}
		})
	}
}

func TestValidateCollectsEveryProblem(t *testing.T) {
	p := retry.Waits(1500*time.Millisecond, 2500*time.Millisecond).With(retry.InProcessLimit(0), retry.InProcessLimit(-s))
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	for _, w := range []string{"InProcessLimit(-1s)", "broker wait 1.5s", "broker wait 2.5s"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestValidateAcceptsEdges(t *testing.T) {
	for name, p := range map[string]retry.Policy{
		"max attempts":              retry.Fixed(retry.MaxAttempts, 0),
		"max waits":                 retry.Waits(make([]time.Duration, retry.MaxAttempts-1)...),
		"sub-second in-process":     retry.Waits(1500 * time.Millisecond),
		"longest broker wait":       retry.Fixed(2, 4294967*s),
		"long in-process waits":     retry.Exponential(62, time.Nanosecond, retry.InProcessLimit(1<<62)),
		"limit 0, whole seconds":    retry.Exponential(4, s, retry.InProcessLimit(0)),
		"exponential at the border": retry.Exponential(2, time.Duration(1<<62)+1, retry.InProcessLimit(1<<63-1)),
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", name, err)
		}
	}
}

func TestInvalidConstructorsHaveNoWaits(t *testing.T) {
	for _, p := range []retry.Policy{
		retry.Exponential(0, s), retry.Exponential(3, -s), retry.Exponential(100, time.Hour),
		retry.Fixed(-1, s), retry.Fixed(2, -s), retry.Waits(s, -s),
	} {
		if p.Attempts() != 1 || len(p.Schedule()) != 0 || p.After(1) != (retry.Step{}) {
			t.Errorf("invalid policy %v has a schedule %v", p, p.Schedule())
		}
	}
}

func TestZeroPolicy(t *testing.T) {
	var p retry.Policy
	if err := p.Validate(); err != nil {
		t.Errorf("zero Policy: Validate() = %v", err)
	}
	if p.Attempts() != 1 || p.Schedule() != nil || p.BrokerRungs() != nil {
		t.Errorf("zero Policy: %d attempts, schedule %v, rungs %v", p.Attempts(), p.Schedule(), p.BrokerRungs())
	}
	if got, want := p.String(), "1 attempt, in-process up to 30s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestImmutable(t *testing.T) {
	p := retry.Exponential(6, 10*s)
	sched := p.Schedule()
	sched[0] = time.Hour
	rungs := p.BrokerRungs()
	rungs[0] = time.Hour
	if got := p.Schedule(); got[0] != 10*s {
		t.Errorf("mutating Schedule()'s slice changed the policy: %v", got)
	}
	if got := p.BrokerRungs(); got[0] != 40*s {
		t.Errorf("mutating BrokerRungs()'s slice changed the policy: %v", got)
	}

	in := []time.Duration{40 * s, 50 * s}
	w := retry.Waits(in...)
	in[0] = time.Hour
	if got := w.Schedule(); got[0] != 40*s {
		t.Errorf("mutating the slice given to Waits changed the policy: %v", got)
	}

	q := p.With(retry.InProcessLimit(0))
	if p.InProcessLimit() != 30*s {
		t.Errorf("With changed the original's limit to %v", p.InProcessLimit())
	}
	if q.InProcessLimit() != 0 || !slices.Equal(q.BrokerRungs(), q.Schedule()) {
		t.Errorf("With(InProcessLimit(0)): limit %v, rungs %v", q.InProcessLimit(), q.BrokerRungs())
	}
}

func TestEqual(t *testing.T) {
	tests := []struct {
		name string
		a, b retry.Policy
		want bool
	}{
		{"same constructor", retry.Exponential(6, 10*s), retry.Exponential(6, 10*s), true},
		{"same schedule, other constructor", retry.Exponential(3, 10*s), retry.Waits(10*s, 20*s), true},
		{"fixed as waits", retry.Fixed(3, s), retry.Waits(s, s), true},
		{"one attempt and zero", retry.Exponential(1, 10*s), retry.Policy{}, true},
		{"explicit default limit", retry.Fixed(2, s, retry.InProcessLimit(30*s)), retry.Fixed(2, s), true},
		{"other schedule", retry.Exponential(6, 10*s), retry.Exponential(5, 10*s), false},
		{"other first", retry.Exponential(3, 10*s), retry.Exponential(3, 11*s), false},
		{"other limit", retry.Fixed(2, s), retry.Fixed(2, s, retry.InProcessLimit(0)), false},
		{"invalid and zero", retry.Fixed(0, s), retry.Policy{}, false},
	}
	for _, tc := range tests {
		if got := tc.a.Equal(tc.b); got != tc.want {
			t.Errorf("%s: %v.Equal(%v) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.Equal(tc.a); got != tc.want {
			t.Errorf("%s: Equal is not symmetric", tc.name)
		}
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		p    retry.Policy
		want string
	}{
		{retry.Exponential(6, 10*s), "6 attempts, waits [10s 20s 40s 1m20s 2m40s], in-process up to 30s"},
		{retry.Fixed(2, time.Minute, retry.InProcessLimit(0)), "2 attempts, waits [1m0s], in-process up to 0s"},
		{retry.Policy{}, "1 attempt, in-process up to 30s"},
		{retry.Exponential(0, s), "1 attempt, in-process up to 30s (invalid)"},
	}
	for _, tc := range tests {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
