//go:build integration

package integration

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

// Issue 31, item 11: `acemq publish` says what the broker said. A publish
// the broker refuses at once (an internal exchange; a user without write
// permission: 403 ACCESS_REFUSED) is "refused", exit 1, as soon as the
// broker answers, never "unknown" (which docs/cli.md defines as no answer
// within --timeout). A message the broker returned is "unroutable", also
// with --allow-unroutable (which accepts it: exit 0), never "confirmed"
// (a queue holds it).

// cliPublishRefusedWithin is how soon a refusal must be reported: the
// broker answers in milliseconds; --timeout is far longer.
const cliPublishRefusedWithin = 5 * time.Second

func TestCLIPublishRefusedAtOnce(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	ctx := testenv.Context(t, 2*time.Minute)
	ex := testenv.Name(t, "internal")
	testenv.CleanupExchanges(t, ex)
	if err := b.Declare(ctx, topology.New().Exchange(ex, topology.Internal())); err != nil {
		t.Fatal(err)
	}
	cliPublishRefused(t, "internal exchange", testenv.URL(), "--exchange", ex, "k")

	// A user of a vhost of the test's own, who may read and configure but
	// not write.
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	name := "goit-publish-" + hex.EncodeToString(rb[:])
	for _, args := range [][]string{
		{"add_vhost", name},
		{"add_user", name, "pw-" + name},
		{"set_permissions", "-p", name, name, ".*", "", ".*"},
		{"set_permissions", "-p", name, "guest", ".*", ".*", ".*"},
	} {
		if out, err := testenv.Rabbitmqctl(ctx, "", args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if args[0] == "add_vhost" {
			t.Cleanup(func() {
				if _, err := testenv.Rabbitmqctl(testenv.Context(t, time.Minute), "", "delete_vhost", name); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
		}
		if args[0] == "add_user" {
			t.Cleanup(func() {
				if _, err := testenv.Rabbitmqctl(testenv.Context(t, time.Minute), "", "delete_user", name); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
		}
	}
	u, err := url.Parse(testenv.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, "pw-"+name)
	u.Path = "/" + name
	// The queue exists (declared by the user, who may configure), so only
	// the write permission is missing.
	gu := *u
	gu.User = url.UserPassword("guest", "guest")
	owner := testenv.Broker(t, mq.Config{URLs: []string{gu.String()}, Logger: testenv.Discard()})
	q := testenv.Name(t, "q")
	if err := owner.Declare(ctx, topology.New().Queue(q, topology.Classic())); err != nil {
		t.Fatal(err)
	}
	cliPublishRefused(t, "no write permission", u.String(), q)
}

// cliPublishRefused publishes through acemq --json at url with args and
// wants "refused", exit 1, within cliPublishRefusedWithin.
func cliPublishRefused(t *testing.T, what, url string, args ...string) {
	t.Helper()
	acemqCLI(t) // built before the clock starts
	began := time.Now()
	code, v, errs := cliJSON(t, "x", append([]string{"--url", url, "--timeout", "30s", "publish"}, args...)...)
	took := time.Since(began)
	if code != 1 || v["outcome"] != "refused" || !strings.Contains(errs, "refused") {
		t.Errorf("%s: exit %d, %v, stderr %q; want exit 1, outcome refused", what, code, v, errs)
	}
	if took > cliPublishRefusedWithin {
		t.Errorf("%s: took %v; want the refusal when the broker says it (within %v), not at --timeout", what, took, cliPublishRefusedWithin)
	}
	t.Logf("%s: exit %d, outcome %v in %v: %s", what, code, v["outcome"], took.Round(time.Millisecond), strings.TrimSpace(errs))
}

func TestCLIPublishAllowUnroutableSaysUnroutable(t *testing.T) {
	b := testenv.Broker(t, mq.Config{})
	q, _, _ := opsSetup(t, b)
	nobody := testenv.Name(t, "nobody")
	code, v, errs := cliJSON(t, "x", "publish", nobody, "--allow-unroutable")
	if code != 0 || v["outcome"] != "unroutable" {
		t.Errorf("--allow-unroutable, no queue bound: exit %d, %v, stderr %q; want exit 0 (accepted), outcome unroutable", code, v, errs)
	}
	code, out, errs := cliRun(t, "x", "publish", nobody, "--allow-unroutable")
	if code != 0 || !strings.Contains(out, "unroutable") || strings.Contains(out, "confirmed") {
		t.Errorf("--allow-unroutable, text: exit %d, stdout %q, stderr %q; want it to say unroutable, not confirmed", code, out, errs)
	}
	// Routed, the same flag changes nothing: confirmed, and the queue has it.
	code, v, errs = cliJSON(t, "y", "publish", q, "--allow-unroutable")
	if code != 0 || v["outcome"] != "confirmed" {
		t.Errorf("--allow-unroutable, routed: exit %d, %v, stderr %q", code, v, errs)
	}
	if n := len(testenv.GetAll(t, b, q)); n != 1 {
		t.Errorf("%d messages in %s, want 1", n, q)
	}
}
