//go:build tls

// The TLS suite: run it with `make tls-test`. The test generates a CA and a
// server certificate (for the name localhost only), starts a RabbitMQ node
// of its own with a TLS listener on them (scripts/tlsnode.sh: tls@localhost,
// AMQPS on 127.0.0.1:5691), and stops it at the end. The shared broker is
// never touched.

package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-go/internal/testenv"
	"github.com/acemq/acemq-go/mq"
	"github.com/acemq/acemq-go/topology"
)

const (
	tlsNode  = "tls@localhost"
	tlsPort  = "5691"
	tlsUser  = "goit_tls"
	tlsNodeS = "../scripts/tlsnode.sh"
)

// tlsPKI is a CA and a server certificate signed by it, written as PEM
// files into dir.
type tlsPKI struct {
	dir  string
	pool *x509.CertPool // holds the CA only
}

// newTLSPKI generates a self-signed CA and a server certificate for the DNS
// name localhost (deliberately no IP address, so 127.0.0.1 is a name
// mismatch).
func newTLSPKI(t *testing.T) *tlsPKI {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "AceMQ integration test CA", Organization: []string{"goit"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"goit"}},
		DNSNames:     []string{"localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}

	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	write("server.pem", "CERTIFICATE", srvDER)
	write("server-key.pem", "EC PRIVATE KEY", srvKeyDER)

	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &tlsPKI{dir: dir, pool: pool}
}

// tlsNodeScript runs scripts/tlsnode.sh, bounded in time.
func tlsNodeScript(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tlsNodeS, args...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// startTLSNode starts the TLS node on pki's certificates and stops it when
// the test ends.
func startTLSNode(t *testing.T, pki *tlsPKI) {
	t.Helper()
	out, err := tlsNodeScript("up", pki.dir)
	t.Cleanup(func() {
		if out, err := tlsNodeScript("down"); err != nil {
			t.Errorf("scripts/tlsnode.sh down: %v\n%s", err, out)
		}
	})
	if err != nil {
		t.Fatalf("scripts/tlsnode.sh up: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// tlsSecret returns a password unique to this run.
func tlsSecret(t *testing.T) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "goitTLS" + hex.EncodeToString(b[:])
}

// tlsDialFails starts a broker on cfg that must not connect, and returns
// the error Start gave. Start retries until its context ends, so the
// context is short.
func tlsDialFails(t *testing.T, cfg mq.Config) error {
	t.Helper()
	cfg.Logger = testenv.Logger(t)
	cfg.ReconnectMin, cfg.ReconnectMax = 50*time.Millisecond, 200*time.Millisecond
	b := mq.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := b.Start(ctx)
	if cerr := b.Close(context.Background()); cerr != nil {
		t.Errorf("close: %v", cerr)
	}
	if err == nil {
		t.Fatalf("connected to %s, but it must not have", mq.Redact(cfg.URLs[0]))
	}
	return err
}

func TestTLS(t *testing.T) {
	testenv.NoLeaks(t) // registered first: runs last

	pki := newTLSPKI(t)
	startTLSNode(t, pki)

	// A user of our own with a unique password on our own node, so the
	// password appears nowhere else (guest's password is also its name).
	ctx := testenv.Context(t, 5*time.Minute)
	password := tlsSecret(t)
	if _, err := testenv.Rabbitmqctl(ctx, tlsNode, "add_user", tlsUser, password); err != nil {
		t.Fatalf("add_user: %v", err)
	}
	if _, err := testenv.Rabbitmqctl(ctx, tlsNode, "set_permissions", "-p", "/", tlsUser, ".*", ".*", ".*"); err != nil {
		t.Fatalf("set_permissions: %v", err)
	}
	url := "amqps://" + tlsUser + ":" + password + "@localhost:" + tlsPort + "/"
	noPassword := func(t *testing.T, err error) {
		t.Helper()
		if strings.Contains(err.Error(), password) {
			t.Errorf("the error carries the password: %v", err)
		}
	}

	t.Run("verified", func(t *testing.T) {
		b := testenv.Broker(t, mq.Config{URLs: []string{url}, TLS: &tls.Config{RootCAs: pki.pool}})
		ctx := testenv.Context(t, time.Minute)

		// The connection is TLS, as the broker sees it.
		out, err := testenv.Rabbitmqctl(ctx, tlsNode, "list_connections", "user", "ssl", "ssl_protocol", "--no-table-headers")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, tlsUser) || !strings.Contains(out, "true") {
			t.Fatalf("the broker does not list a TLS connection of %s: %q", tlsUser, out)
		}
		t.Logf("broker's view: %s", strings.Join(strings.Fields(out), " "))

		q := testenv.Name(t)
		if err := b.Declare(ctx, topology.New().Queue(q)); err != nil {
			t.Fatalf("declare: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := b.DeleteQueue(ctx, q); err != nil {
				t.Errorf("delete %s: %v", q, err)
			}
		})
		pub := b.Publisher("")
		defer pub.Close()
		if err := pub.Publish(ctx, q, mq.Message{Body: []byte("over TLS"), MessageId: "tls-1"}); err != nil {
			t.Fatalf("publish: %v", err)
		}
		got := make(chan string, 1)
		c, err := b.Consume(ctx, q, mq.HandlerFunc(func(_ context.Context, d *mq.Delivery) error {
			select {
			case got <- d.MessageId + ":" + string(d.Body):
			default:
			}
			return nil
		}))
		if err != nil {
			t.Fatalf("consume: %v", err)
		}
		select {
		case m := <-got:
			if m != "tls-1:over TLS" {
				t.Errorf("consumed %q, want tls-1:over TLS", m)
			}
		case <-ctx.Done():
			t.Fatal("the message published over TLS was not consumed")
		}
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop consumer: %v", err)
		}
	})

	t.Run("system roots refuse the private CA", func(t *testing.T) {
		// Config.TLS nil: the system's roots, which do not hold our CA.
		err := tlsDialFails(t, mq.Config{URLs: []string{url}})
		t.Logf("error: %v", err)
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("the error does not say it is about the certificate: %v", err)
		}
		noPassword(t, err)
	})

	t.Run("server name mismatch: URL host", func(t *testing.T) {
		// The certificate is for localhost; 127.0.0.1 is the same server
		// under a name the certificate does not carry.
		ipURL := strings.Replace(url, "@localhost:", "@127.0.0.1:", 1)
		err := tlsDialFails(t, mq.Config{URLs: []string{ipURL}, TLS: &tls.Config{RootCAs: pki.pool}})
		t.Logf("error: %v", err)
		if msg := err.Error(); !strings.Contains(msg, "x509: cannot validate certificate for 127.0.0.1") &&
			!strings.Contains(msg, "x509: certificate is valid for localhost, not 127.0.0.1") {
			t.Errorf("the error does not report the name mismatch: %v", err)
		}
		noPassword(t, err)
	})

	t.Run("ServerName names the certificate's host", func(t *testing.T) {
		// The same address, verified under the name the certificate has.
		ipURL := strings.Replace(url, "@localhost:", "@127.0.0.1:", 1)
		b := testenv.Broker(t, mq.Config{URLs: []string{ipURL}, TLS: &tls.Config{RootCAs: pki.pool, ServerName: "localhost"}})
		if !b.Ready() {
			t.Fatal("not connected")
		}
	})

	t.Run("server name mismatch: ServerName", func(t *testing.T) {
		err := tlsDialFails(t, mq.Config{URLs: []string{url}, TLS: &tls.Config{RootCAs: pki.pool, ServerName: "broker.example"}})
		t.Logf("error: %v", err)
		if !strings.Contains(err.Error(), "certificate is valid for localhost, not broker.example") {
			t.Errorf("the error does not report the name mismatch: %v", err)
		}
		noPassword(t, err)
	})

	t.Run("plain AMQP to the TLS port fails", func(t *testing.T) {
		plain := strings.Replace(url, "amqps://", "amqp://", 1)
		err := tlsDialFails(t, mq.Config{URLs: []string{plain}})
		t.Logf("error: %v", err)
		noPassword(t, err)
	})
}
