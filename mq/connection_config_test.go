package mq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/mq"
)

func TestRedact(t *testing.T) {
	const pw = "s3cr3t"
	tests := []struct {
		in, want string
	}{
		{"amqp://guest:" + pw + "@localhost:5672/", "amqp://guest:xxxxx@localhost:5672/"},
		{"amqps://user:" + pw + "@rabbit.example.com/vhost", "amqps://user:xxxxx@rabbit.example.com/vhost"},
		// Percent-encoded specials in the password are still a password.
		{"amqp://user:p%40ss%2F" + pw + "@host/", "amqp://user:xxxxx@host/"},
		// A user without a password keeps the name; no credentials, nothing
		// to hide.
		{"amqp://guest@host/", "amqp://guest@host/"},
		{"amqp://host:5672/%2F", "amqp://host:5672/%2F"},
		// Harmless query parameters stay readable, the rest are hidden.
		{"amqp://u:" + pw + "@h/?heartbeat=10&connection_timeout=5000", "amqp://u:xxxxx@h/?connection_timeout=5000&heartbeat=10"},
		{"amqps://u:" + pw + "@h/?keyfile=/etc/k.pem&password=" + pw + "&heartbeat=5", "amqps://u:xxxxx@h/?heartbeat=5&keyfile=xxxxx&password=xxxxx"},
		// A fragment is dropped.
		{"amqp://h/#" + pw, "amqp://h/"},
		// An unescaped '#', '?' or '/' in a password moves its tail into
		// the fragment, query or path, and its head into the host or
		// port: nothing of it is printed.
		{"amqp://u:123#" + pw + "@host/", "<URL with unparseable credentials: percent-encode them>"},
		{"amqp://u:12?" + pw + "@host/", "<URL with unparseable credentials: percent-encode them>"},
		{"amqp://u:12/" + pw + "@host/", "<URL with unparseable credentials: percent-encode them>"},
		// Unparseable, opaque: nothing of it.
		{"amqp://u:" + pw + "@host:port/", "<unparseable URL>"},
		{"amqp:u:" + pw + "@host", "<unparseable URL>"},
		{"amqp://u:" + pw + "@ho st/", "<unparseable URL>"},
		{"", ""},
		// A PostgreSQL keyword/value connection string: its password is
		// hidden, quoted or not, and the rest is kept.
		{"host=db user=app password=" + pw + " dbname=test", "host=db user=app password=xxxxx dbname=test"},
		{"host=db password = '" + pw + " two' dbname=test", "host=db password=xxxxx dbname=test"},
		{`password='it\'s ` + pw + `' host=db`, "password=xxxxx host=db"},
		{"host=db password=" + pw, "host=db password=xxxxx"},
		// "host= password=…" is host's value to libpq, and still hidden.
		{"host= password=" + pw + " dbname=test", "host= password=xxxxx dbname=test"},
		// Not keyword=value throughout, or a quote left open (which libpq
		// refuses): nothing of it.
		{"host=db password='" + pw + " dbname=test", "<unparseable connection string>"},
		{"host=db " + pw + " password=x", "<unparseable connection string>"},
	}
	for _, tt := range tests {
		got := mq.Redact(tt.in)
		if got != tt.want {
			t.Errorf("Redact(%q) = %q; want %q", tt.in, got, tt.want)
		}
		if strings.Contains(got, pw) {
			t.Errorf("Redact(%q) = %q shows the password", tt.in, got)
		}
	}
}

// Redact's output must not depend on the password: the same URL with
// every letter and digit of the password changed (its punctuation kept, so
// the URL parses the same way) redacts to the same string.
func FuzzRedactNeverShowsPassword(f *testing.F) {
	f.Add("guest", "s3cr3t-pw", "localhost:5672", "vhost")
	f.Add("u", "a#b?c/d@e", "h", "")
	f.Add("u", "123#456", "h:1", "v?x=1")
	f.Add("", "000?00", "0", "0")
	f.Fuzz(func(t *testing.T, user, pw, host, path string) {
		other := []byte(pw)
		changed := false
		for i, c := range other {
			switch {
			case c >= '0' && c <= '9':
				other[i], changed = '0'+(c-'0'+1)%10, true
			case c >= 'a' && c <= 'z':
				other[i], changed = 'a'+(c-'a'+1)%26, true
			case c >= 'A' && c <= 'Z':
				other[i], changed = 'A'+(c-'A'+1)%26, true
			}
		}
		if !changed || strings.Contains(pw, "%") { // changing %XX changes whether the URL parses
			t.Skip()
		}
		u1 := "amqp://" + user + ":" + pw + "@" + host + "/" + path
		u2 := "amqp://" + user + ":" + string(other) + "@" + host + "/" + path
		if r1, r2 := mq.Redact(u1), mq.Redact(u2); r1 != r2 {
			t.Fatalf("Redact depends on the password:\n%q -> %q\n%q -> %q", u1, r1, u2, r2)
		}
	})
}

// The same for a keyword/value connection string, its password quoted
// (escaped as libpq reads it) or not, beside an empty or plain host.
func FuzzRedactKeywordsNeverShowsPassword(f *testing.F) {
	f.Add("db", "s3cr3t")
	f.Add("db", "it's a pass\\word")
	f.Add("", "0 dbname=1")
	f.Fuzz(func(t *testing.T, host, pw string) {
		other := []byte(pw)
		changed := false
		for i, c := range other {
			switch {
			case c >= '0' && c <= '9':
				other[i], changed = '0'+(c-'0'+1)%10, true
			case c >= 'a' && c <= 'z':
				other[i], changed = 'a'+(c-'a'+1)%26, true
			}
		}
		if !changed || strings.ContainsAny(host, " \t\n\r\f\v'\\=") { // the host a plain value
			t.Skip()
		}
		quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
		kv := func(pw string) string { return "host=" + host + " password='" + quote.Replace(pw) + "' dbname=test" }
		if r1, r2 := mq.Redact(kv(pw)), mq.Redact(kv(string(other))); r1 != r2 {
			t.Fatalf("Redact depends on the password:\n%q -> %q\n%q -> %q", kv(pw), r1, kv(string(other)), r2)
		}
		if !strings.ContainsAny(pw, " \t\n\r\f\v'\\") {
			bare := func(pw string) string { return "host=" + host + " password=" + pw }
			if r1, r2 := mq.Redact(bare(pw)), mq.Redact(bare(string(other))); r1 != r2 {
				t.Fatalf("Redact depends on the password:\n%q -> %q\n%q -> %q", bare(pw), r1, bare(string(other)), r2)
			}
		}
	})
}

// Start validates the configuration before dialling anything, and says
// every problem at once, never showing a password.
func TestConfigValidation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tests := []struct {
		name string
		cfg  mq.Config
		want []string
	}{
		{"no URLs", mq.Config{}, []string{"Config.URLs is empty"}},
		{"bad scheme", mq.Config{URLs: []string{"http://u:s3cr3t@h/"}}, []string{"Config.URLs[0] http://u:xxxxx@h/ is not an amqp:// or amqps:// URL"}},
		{"no host", mq.Config{URLs: []string{"amqp:///vhost"}}, []string{"Config.URLs[0]"}},
		{"unparseable", mq.Config{URLs: []string{"amqp://u:s3cr3t@h:port/"}}, []string{"Config.URLs[0] <unparseable URL>"}},
		{"mangled password", mq.Config{URLs: []string{"amqp://guest:guest@h/", "amqp://u:12#s3cr3t@h/"}}, []string{"Config.URLs[1]", "percent-encode"}},
		{"negative", mq.Config{URLs: []string{"amqp://h/"}, Heartbeat: -time.Second}, []string{"must not be negative"}},
		{"several", mq.Config{URLs: []string{"amqp://h/", "ftp://h/"}, ReconnectMin: -1}, []string{"Config.URLs[1]", "must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mq.New(tt.cfg)
			defer b.Close(ctx)
			err := b.Start(ctx)
			if err == nil {
				t.Fatal("Start accepted an invalid configuration")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error shows the password: %v", err)
			}
			if b.Ready() {
				t.Error("Ready after a refused configuration")
			}
		})
	}
}

// A broker that was never started refuses work with ErrNotReady, saying
// to call Start, instead of waiting for a connection that is not coming;
// a closed one with ErrClosed.
func TestBrokerNotStartedAndClosed(t *testing.T) {
	notStarted := func(err error) bool {
		return errors.Is(err, mq.ErrNotReady) && strings.Contains(fmt.Sprint(err), "Start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b := mq.New(mq.Config{URLs: []string{"amqp://127.0.0.1:1/"}})
	if _, err := b.QueueExists(ctx, "q"); !notStarted(err) {
		t.Errorf("QueueExists before Start: %v; want ErrNotReady, naming Start", err)
	}
	if err := b.Publisher("").Publish(ctx, "q", mq.Message{}); !notStarted(err) {
		t.Errorf("Publish before Start: %v; want ErrNotReady, naming Start", err)
	}
	if err := b.WaitReady(ctx); !notStarted(err) {
		t.Errorf("WaitReady before Start: %v; want ErrNotReady, naming Start", err)
	}
	if err := b.Check(ctx); !notStarted(err) {
		t.Errorf("Check before Start: %v; want ErrNotReady, naming Start", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close of a broker never started: %v", err)
	}
	if err := b.Start(ctx); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Start after Close: %v; want ErrClosed", err)
	}
	if _, err := b.Channel(ctx); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Channel after Close: %v; want ErrClosed", err)
	}
	if err := b.Publisher("").Publish(ctx, "q", mq.Message{}); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Publish on a publisher made after Close: %v; want ErrClosed", err)
	}
}

// Headers amqp091-go cannot encode are refused before anything is sent.
func TestPublishRefusesBadHeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b := mq.New(mq.Config{URLs: []string{"amqp://127.0.0.1:1/"}})
	defer b.Close(ctx)
	err := b.Publisher("").Publish(ctx, "q", mq.Message{Headers: map[string]any{"bad": struct{}{}}})
	if err == nil || errors.Is(err, mq.ErrNotReady) {
		t.Fatalf("Publish with an unencodable header: %v; want a header error first", err)
	}
}

// Hooks are given in Config, with everything else a Broker is built from:
// one that implements none of the hook interfaces fails Start, naming its
// place in Config.Hooks, before anything is dialled; a nil one is skipped.
func TestConfigHooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b := mq.New(mq.Config{URLs: []string{"amqp://127.0.0.1:1/"}, Hooks: []any{nil, eventCounter{}, "not a hook"}})
	defer b.Close(ctx)
	err := b.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "Config.Hooks[2]") || !strings.Contains(err.Error(), "string") {
		t.Fatalf("Start with a hook that is none: %v; want an error naming Config.Hooks[2] and its type", err)
	}
	if strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Start dialled before refusing the hook: %v", err)
	}
}

type eventCounter struct{}

func (eventCounter) OnEvent(context.Context, mq.Event) {}
