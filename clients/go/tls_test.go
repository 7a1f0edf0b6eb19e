package squawk

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// issued is a certificate and its key, usable by crypto/tls and as PEM.
type issued struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func (c issued) pair() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.cert.Raw}, PrivateKey: c.key, Leaf: c.cert}
}

func (c issued) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// issue makes an EC P-256 certificate for name, signed by parent (nil: a
// self-signed CA). usage is x509.ExtKeyUsageServerAuth or ClientAuth for a
// leaf, which is valid for 127.0.0.1 and localhost as the daemon's is.
func issue(t *testing.T, name string, parent *issued, usage x509.ExtKeyUsage) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		BasicConstraintsValid: true,
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA = true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return issued{cert: cert, key: key}
}

// writePEM writes a PEM file into dir and returns its path.
func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startMutualTLSDaemon serves mutual TLS with a server certificate of ca,
// trusting client certificates of ca only.
func startMutualTLSDaemon(t *testing.T, ca issued) *daemon {
	t.Helper()
	dir := t.TempDir()
	server := issue(t, "squawk", &ca, x509.ExtKeyUsageServerAuth)
	keyDER, err := x509.MarshalPKCS8PrivateKey(server.key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := startDaemonHealthOn(mustFreeAddr(t), mustFreeAddr(t),
		"--tls-cert", writePEM(t, dir, "server.pem", "CERTIFICATE", server.cert.Raw),
		"--tls-key", writePEM(t, dir, "server.key", "PRIVATE KEY", keyDER),
		"--tls-client-ca", writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.cert.Raw),
	)
	if err != nil {
		t.Fatalf("cannot run the Squawk daemon: %v", err)
	}
	t.Cleanup(d.stop)
	return d
}

func withTLS(cfg *tls.Config) Option {
	return WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
}

// The documented way to reach a daemon that serves mutual TLS: transport
// credentials through WithDialOptions. A client the daemon or the client
// itself does not trust gets an error, never an answer.
func TestMutualTLS(t *testing.T) {
	ca := issue(t, "squawk-ca", nil, 0)
	other := issue(t, "other-ca", nil, 0)
	d := startMutualTLSDaemon(t, ca)
	client := issue(t, "executor", &ca, x509.ExtKeyUsageClientAuth)
	stranger := issue(t, "stranger", &other, x509.ExtKeyUsageClientAuth)

	t.Run("a client certificate of the trusted CA is answered", func(t *testing.T) {
		c := newClient(t, d.addr, WithCallTimeout(10*time.Second),
			withTLS(&tls.Config{RootCAs: ca.pool(), Certificates: []tls.Certificate{client.pair()}}))
		resp, err := c.Classify(context.Background(), &squawkv1.ClassifyRequest{ErrorMessage: "HTTP 503"})
		if err != nil {
			t.Fatalf("Classify over mutual TLS: %v; the daemon's output:\n%s", err, d.out)
		}
		if resp.GetRedactedMessage() != "HTTP 503" || !resp.GetRetryable() {
			t.Errorf("Classify = %v, want HTTP 503, retryable", resp)
		}
	})

	refused := []struct {
		name string
		opts []Option
	}{
		{"no client certificate", []Option{withTLS(&tls.Config{RootCAs: ca.pool()})}},
		{"a client certificate of another CA", []Option{
			withTLS(&tls.Config{RootCAs: ca.pool(), Certificates: []tls.Certificate{stranger.pair()}})}},
		{"a client that does not trust the server's CA", []Option{
			withTLS(&tls.Config{RootCAs: other.pool(), Certificates: []tls.Certificate{client.pair()}})}},
		{"plaintext", nil},
	}
	for _, tc := range refused {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			c := newClient(t, d.addr, append(tc.opts, WithCallTimeout(10*time.Second), WithFallbackDisabled())...)
			resp, err := c.Classify(context.Background(), &squawkv1.ClassifyRequest{ErrorMessage: "HTTP 503"})
			if code := status.Code(err); code != codes.Unavailable {
				t.Fatalf("Classify = %v, %v; want UNAVAILABLE", resp, err)
			}
			dec, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
			if code := status.Code(err); code != codes.Unavailable {
				t.Fatalf("DecideRetry without fallback = %v, %v; want UNAVAILABLE", dec, err)
			}
		})
	}

	// A refused handshake reads as an unreachable daemon, so with the
	// fallback on (the default) decisions come from it, marked and counted.
	t.Run("a refused client's decisions come from the fallback by default", func(t *testing.T) {
		c := newClient(t, d.addr, WithCallTimeout(10*time.Second), withTLS(&tls.Config{RootCAs: ca.pool()}))
		dec, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
		if err != nil || !dec.Fallback || c.FallbackCount() != 1 {
			t.Fatalf("DecideRetry = %v, %v (fallbacks %d); want a fallback decision", dec, err, c.FallbackCount())
		}
	})
}
