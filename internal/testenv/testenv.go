package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acemq/acemq-go/mq"
)

// DefaultURL is the local broker `make broker` starts.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL is the broker the integration tests run against.
func URL() string {
	if u := os.Getenv("AMQP_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var unsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// Name returns a queue or exchange name unique to this test run:
// goit.<test>.<random>[.<suffix>]. Everything the integration suite creates
// is named goit.* so it can share a broker.
func Name(t testing.TB, suffix ...string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := strings.Trim(unsafe.ReplaceAllString(t.Name(), "_"), "_")
	if len(n) > 60 {
		n = n[len(n)-60:]
	}
	name := "goit." + n + "." + hex.EncodeToString(b[:])
	for _, s := range suffix {
		name += "." + s
	}
	return name
}

// Logger returns a logger writing to the test log at debug level (or
// nowhere with -short... always to t.Log, so failures show what happened).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Discard is a logger that writes nothing.
func Discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Context returns a context that ends after d or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Broker starts a broker on URL() (or the given URLs) for the test and
// closes it when the test ends, before anything Cleanup, CleanupDerived or
// CleanupExchanges deletes. A broker that does not answer fails the test.
func Broker(t testing.TB, cfg mq.Config) *mq.Broker {
	t.Helper()
	if len(cfg.URLs) == 0 {
		cfg.URLs = []string{URL()}
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger(t)
	}
	if cfg.ReconnectMin == 0 {
		cfg.ReconnectMin = 20 * time.Millisecond
	}
	if cfg.ReconnectMax == 0 {
		cfg.ReconnectMax = 500 * time.Millisecond
	}
	b := mq.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("the broker at %s does not answer (run `make broker`): %v", mq.Redact(cfg.URLs[0]), err)
	}
	track(t, b)
	t.Cleanup(func() { closeTracked(t) })
	return b
}

// brokers are the brokers Broker started, by test, until they are closed.
var brokers = struct {
	mu sync.Mutex
	of map[testing.TB][]*mq.Broker
}{of: map[testing.TB][]*mq.Broker{}}

func track(t testing.TB, b *mq.Broker) {
	brokers.mu.Lock()
	defer brokers.mu.Unlock()
	brokers.of[t] = append(brokers.of[t], b)
}

// closeTracked closes the brokers t's Broker calls started and are still
// open. Cleanup runs it before it deletes anything: a consumer still
// running would see its queue deleted, and its Broker would declare the
// queue again (a queue it declared) and leave it behind.
func closeTracked(t testing.TB) {
	brokers.mu.Lock()
	bs := brokers.of[t]
	delete(brokers.of, t)
	brokers.mu.Unlock()
	for i := len(bs) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := bs[i].Close(ctx); err != nil {
			t.Errorf("close broker: %v", err)
		}
		cancel()
	}
}

// Cleanup deletes the named queues when the test ends, on a broker of its
// own (the test's broker may be closed by then).
func Cleanup(t testing.TB, queues ...string) {
	atEnd(t, func(ctx context.Context, b *mq.Broker) {
		for _, q := range queues {
			if _, err := b.DeleteQueue(ctx, q); err != nil {
				t.Errorf("cleanup: delete %s: %v", q, err)
			}
		}
	})
}

// atEnd runs fn when the test ends, on a broker of its own (the test's
// broker may be closed by then), all within 20 s.
func atEnd(t testing.TB, fn func(ctx context.Context, b *mq.Broker)) {
	t.Cleanup(func() {
		closeTracked(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b := mq.New(mq.Config{URLs: []string{URL()}, Logger: Discard()})
		if err := b.Start(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer b.Close(ctx)
		fn(ctx, b)
	})
}

// Eventually polls cond every 20 ms until it holds or d passes, and fails
// the test with msg if it did not hold by then.
func Eventually(t testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("not within %v: "+msg, append([]any{d}, args...)...)
	}
}

// Poll polls cond every 20 ms until it holds or d passes, and reports
// whether it held: the caller decides how bad it is.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Wait waits for wg at most d and reports whether it finished by then
// (if not, its goroutines go on, and so does the one waiting for them).
func Wait(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// NoLeaks checks, when the test ends, that the goroutines are back to what
// they were when NoLeaks was called. goleak retries for a while before it
// fails, which is the settle time for goroutines on their way out. Call it
// first thing in a test, so its cleanup runs last: after the brokers,
// proxies and queues the test set up are closed and deleted.
func NoLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		start, failed := time.Now(), t.Failed()
		goleak.VerifyNone(t, ignore)
		if t.Failed() == failed {
			t.Logf("goroutines back to baseline (checked in %v)", time.Since(start).Round(time.Millisecond))
		}
	})
}
