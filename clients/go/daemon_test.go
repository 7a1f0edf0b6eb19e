package squawk

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The tests run the real daemon: ../../.venv/bin/squawk (made by `make setup`
// at the repo root), or the executable named by SQUAWK_BIN.

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

func daemonBin() (string, error) {
	bin := os.Getenv("SQUAWK_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot, ".venv", "bin", "squawk")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("daemon executable %s is missing (%v): run `make setup` at the repo root first, or set SQUAWK_BIN", abs, err)
	}
	return abs, nil
}

// syncBuffer collects the daemon's output for failure messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type daemon struct {
	addr string
	// health is where readiness is read: addr itself, or a plaintext
	// --health-listen port when addr needs credentials.
	health  string
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan struct{}
	waitErr error
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
	bin, err := daemonBin()
	if err != nil {
		return nil, err
	}
	d := &daemon{addr: addr, health: health, out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, append([]string{"serve", "--listen", addr}, args...)...)
	d.cmd.Dir = repoRoot
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = daemonProcAttr()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(d.cmd.Args, " "), err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if err := d.waitServing(30 * time.Second); err != nil {
		d.kill()
		return nil, err
	}
	return d, nil
}

func (d *daemon) waitServing(limit time.Duration) error {
	conn, err := grpc.NewClient(d.health, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return fmt.Errorf("`%s` exited before serving (%v); its output:\n%s", d.command(), d.waitErr, d.out)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("health status %v", resp.GetStatus())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("`%s` not SERVING after %v (last: %v); its output:\n%s", d.command(), limit, last, d.out)
}

// command is the daemon's command line as a person would type it.
func (d *daemon) command() string {
	return strings.Join(append([]string{"squawk"}, d.cmd.Args[1:]...), " ")
}

// kill sends SIGKILL and waits for the process to end.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// stop asks the daemon to drain (SIGTERM) and kills it if it lingers.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.kill()
	}
}

// freeAddr is a loopback address with a port nothing listens on right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

func mustFreeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
