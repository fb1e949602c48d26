package testenv

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

// Version is a RabbitMQ release, as the broker names itself in its
// connection's server properties ("version": "4.3.6").
type Version struct {
	Major, Minor, Patch int
}

// String is the version as RabbitMQ writes it.
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// ParseVersion reads "4.3.6" (a suffix such as "+rc.1" or "-beta" after
// the numbers is ignored).
func ParseVersion(s string) (Version, error) {
	var v Version
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v, fmt.Errorf("testenv: broker version %q: want major.minor[.patch]", s)
	}
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		end := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' })
		if end == 0 {
			return v, fmt.Errorf("testenv: broker version %q: part %q is not a number", s, p)
		}
		if end > 0 {
			p = p[:end]
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, fmt.Errorf("testenv: broker version %q: %w", s, err)
		}
		*nums[i] = n
	}
	return v, nil
}

var versions sync.Map // URL -> Version

// BrokerVersion is the version of the broker at URL(), from its
// connection's server properties, asked once per test binary. A broker that
// does not answer or does not say fails the test.
func BrokerVersion(t testing.TB) Version {
	t.Helper()
	u := URL()
	if v, ok := versions.Load(u); ok {
		return v.(Version)
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Fatalf("testenv: the broker at %s does not answer (run `make broker`): %v", mq.Redact(u), err)
	}
	defer conn.Close()
	s, _ := conn.Properties["version"].(string)
	v, err := ParseVersion(s)
	if err != nil {
		t.Fatalf("%v", err)
	}
	versions.Store(u, v)
	return v
}
