package conformance

import (
	"fmt"

	"github.com/acemq/acemq-go/topology"
)

// DurableRungs is durable_rungs.json: durable rungs' names and argument
// tables, and how every rung name, of either kind, reads back.
type DurableRungs struct {
	About     string `json:"about"`
	Constants struct {
		DurableRungSuffix  string `json:"durable_rung_suffix"`
		DeadLetterStrategy string `json:"dead_letter_strategy"`
		Overflow           string `json:"overflow"`
	} `json:"constants"`
	Rungs []struct {
		Queue     string           `json:"queue"`
		Ms        int64            `json:"ms"`
		Classic   string           `json:"classic"`
		Name      string           `json:"name"`
		Arguments map[string]Typed `json:"arguments"`
	} `json:"rungs"`
	Parse []struct {
		Name    string `json:"name"`
		OK      bool   `json:"ok"`
		Queue   string `json:"queue,omitempty"`
		Ms      int64  `json:"ms,omitempty"`
		Durable bool   `json:"durable,omitempty"`
	} `json:"parse"`
}

// CheckDurableRungs runs durable_rungs.json against package topology.
func CheckDurableRungs(v DurableRungs) []string {
	var out []string
	fail := func(format string, args ...any) { out = append(out, "durable rungs: "+fmt.Sprintf(format, args...)) }
	eq := func(what, got, want string) {
		if got != want {
			fail("%s is %q, the vector says %q", what, got, want)
		}
	}
	c := v.Constants
	eq("the durable rung suffix", topology.DurableRungSuffix, c.DurableRungSuffix)
	eq("the dead-letter strategy", topology.DeadLetterAtLeastOnce, c.DeadLetterStrategy)
	eq("the overflow", topology.OverflowRejectPublish, c.Overflow)
	if len(v.Rungs) == 0 || len(v.Parse) == 0 {
		fail("the vector has no rungs or no names to parse")
	}
	for _, r := range v.Rungs {
		what := fmt.Sprintf("the %d ms durable rung of %s", r.Ms, r.Queue)
		eq(what, topology.DurableRungQueue(r.Queue, ms(r.Ms)), r.Name)
		eq(fmt.Sprintf("the %d ms classic rung of %s", r.Ms, r.Queue), topology.RungQueue(r.Queue, ms(r.Ms)), r.Classic)
		if r.Name == r.Classic {
			fail("%s: the vector names both kinds %q", what, r.Name)
		}
		want, err := DecodeTable(r.Arguments, nil)
		if err != nil {
			fail("%s: the vector's arguments: %v", what, err)
			continue
		}
		eq(what+"'s arguments", CanonTable(topology.DurableRungArguments(r.Queue, ms(r.Ms))), CanonTable(want))
	}
	for _, p := range v.Parse {
		q, w, durable, ok := topology.ParseRung(p.Name)
		if ok != p.OK || (ok && (q != p.Queue || w != ms(p.Ms) || durable != p.Durable)) {
			fail("parse %q gives (%q, %v, durable %v, ok %v), the vector says (%q, %v, durable %v, ok %v)",
				p.Name, q, w, durable, ok, p.Queue, ms(p.Ms), p.Durable, p.OK)
		}
	}
	return out
}
