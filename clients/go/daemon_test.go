package squawk

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

var shared struct {
	once sync.Once
	d    *daemon
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.d != nil {
		shared.d.stop()
	}
	os.Exit(code)
}

// requireDaemon returns the daemon shared by the tests, starting it on first
// use. A missing or broken daemon fails the test: it is never skipped.
func requireDaemon(t *testing.T) *daemon {
	t.Helper()
	shared.once.Do(func() {
		addr, err := freeAddr()
		if err != nil {
			shared.err = err
			return
		}
		shared.d, shared.err = startDaemon(addr)
	})
	if shared.err != nil {
		t.Fatalf("cannot run the Squawk daemon: %v", shared.err)
	}
	return shared.d
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
	addr    string
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan struct{}
	waitErr error
}

// startDaemon runs `squawk serve --listen addr` and waits until its health
// service answers SERVING.
func startDaemon(addr string) (*daemon, error) {
	bin, err := daemonBin()
	if err != nil {
		return nil, err
	}
	d := &daemon{addr: addr, out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, "serve", "--listen", addr)
	d.cmd.Dir = repoRoot
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = daemonProcAttr()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve --listen %s: %w", bin, addr, err)
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
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
			return fmt.Errorf("`squawk serve --listen %s` exited before serving (%v); its output:\n%s", d.addr, d.waitErr, d.out)
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
	return fmt.Errorf("`squawk serve --listen %s` not SERVING after %v (last: %v); its output:\n%s", d.addr, limit, last, d.out)
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
