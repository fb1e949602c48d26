package outboxtest

import (
	"strings"
	"testing"

	"github.com/acemq/acemq-go/mq"
)

// A PostgreSQL that does not answer is named in the failure without its
// password, whichever form PG_URL takes: a URL or keyword/value pairs.
func TestRedactHidesPasswords(t *testing.T) {
	for _, s := range []string{
		"postgres://app:s3cret@db:5432/test?sslmode=disable",
		"postgres://app@db:5432/test?password=s3cret&sslmode=disable",
		"host=db user=app password=s3cret dbname=test",
		"host=db password = 's3cret two' dbname=test",
	} {
		if got := mq.Redact(s); strings.Contains(got, "s3cret") || !strings.Contains(got, "db") {
			t.Errorf("mq.Redact(%q) = %q: want the host kept and the password hidden", s, got)
		}
	}
}
