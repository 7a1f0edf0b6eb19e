package squawk

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/squawk-dev/squawk/clients/go/internal/daemontest"
)

// The tests run the real daemon (see daemontest): ../../.venv/bin/squawk
// (made by `make setup` at the repo root), or the executable named by
// SQUAWK_BIN.

const repoRoot = "../.."

// sharedDaemon is one daemon shared by the tests that need it, started on
// first use with args after `serve --listen ADDR`.
type sharedDaemon struct {
	args []string
	once sync.Once
	d    *daemon
	err  error
}

var (
	// builtIn serves the built-in policy.
	builtIn = &sharedDaemon{}
	// withUpstreamPolicy serves testdata/upstreams-policy.yaml, which pins
	// the upstream settings the Admit and runner tests rely on.
	withUpstreamPolicy = &sharedDaemon{args: []string{"--policy", "testdata/upstreams-policy.yaml"}}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range []*sharedDaemon{builtIn, withUpstreamPolicy} {
		if s.d != nil {
			s.d.stop()
		}
	}
	os.Exit(code)
}

// requireDaemon returns the daemon with the built-in policy shared by the
// tests. A missing or broken daemon fails the test: it is never skipped.
func requireDaemon(t *testing.T) *daemon {
	t.Helper()
	return builtIn.require(t)
}

// requireUpstreamDaemon returns the daemon serving the upstream tests'
// policy file. Its upstream state lives as long as the test binary, so
// each test names its own upstreams (see uniqueUpstream).
func requireUpstreamDaemon(t *testing.T) *daemon {
	t.Helper()
	return withUpstreamPolicy.require(t)
}

func (s *sharedDaemon) require(t *testing.T) *daemon {
	t.Helper()
	s.once.Do(func() {
		addr, err := freeAddr()
		if err != nil {
			s.err = err
			return
		}
		args := make([]string, len(s.args))
		for i, a := range s.args {
			// The daemon runs in the repo root; files are named from here.
			if strings.HasPrefix(a, "testdata/") {
				if a, err = filepath.Abs(a); err != nil {
					s.err = err
					return
				}
			}
			args[i] = a
		}
		s.d, s.err = startDaemon(addr, args...)
	})
	if s.err != nil {
		t.Fatalf("cannot run the Squawk daemon: %v", s.err)
	}
	return s.d
}

// daemon is a running daemon (see daemontest), with the names the tests use.
type daemon struct {
	*daemontest.Daemon
	addr string
	out  *daemontest.Output
}

// startDaemon runs `squawk serve --listen addr args...` (in the repo root)
// and waits until its health service answers SERVING.
func startDaemon(addr string, args ...string) (*daemon, error) {
	return launchDaemon(addr, addr, args)
}

// startDaemonHealthOn runs `squawk serve --listen addr --health-listen
// health args...` and waits on health, which stays plaintext when args turn
// TLS on for addr.
func startDaemonHealthOn(addr, health string, args ...string) (*daemon, error) {
	return launchDaemon(addr, health, append([]string{"--health-listen", health}, args...))
}

func launchDaemon(addr, health string, args []string) (*daemon, error) {
	d, err := daemontest.Start(repoRoot, addr, health, args)
	if err != nil {
		return nil, err
	}
	return &daemon{Daemon: d, addr: d.Addr, out: d.Out}, nil
}

func (d *daemon) kill() { d.Kill() }
func (d *daemon) stop() { d.Stop() }

// freeAddr is a loopback address with a port nothing listens on right now.
func freeAddr() (string, error) { return daemontest.FreeAddr() }

func mustFreeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
