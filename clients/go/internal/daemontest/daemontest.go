// Package daemontest runs the real Squawk daemon for the Go client's tests
// and for the modules beside it that test the client with other libraries
// (clients/go/sdktest): the executable `make setup` installs at the repo
// root (.venv/bin/squawk), or the one named by SQUAWK_BIN.
package daemontest

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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Bin is the daemon's executable: SQUAWK_BIN, else .venv/bin/squawk under
// root (the repo root, relative to the test's directory).
func Bin(root string) (string, error) {
	bin := os.Getenv("SQUAWK_BIN")
	if bin == "" {
		bin = filepath.Join(root, ".venv", "bin", "squawk")
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

// Output collects the daemon's output for failure messages.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Daemon is a running `squawk serve`.
type Daemon struct {
	// Addr is where it serves; Health is where readiness is read: Addr
	// itself, or a plaintext --health-listen port when Addr needs
	// credentials.
	Addr, Health string
	// Out is what it printed.
	Out     *Output
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// Start runs `squawk serve --listen addr args...` in root (the repo root)
// and waits until the health service at health answers SERVING.
func Start(root, addr, health string, args []string) (*Daemon, error) {
	bin, err := Bin(root)
	if err != nil {
		return nil, err
	}
	d := &Daemon{Addr: addr, Health: health, Out: &Output{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, append([]string{"serve", "--listen", addr}, args...)...)
	d.cmd.Dir = root
	d.cmd.Stdout, d.cmd.Stderr = d.Out, d.Out
	d.cmd.SysProcAttr = procAttr()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(d.cmd.Args, " "), err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if err := d.waitServing(30 * time.Second); err != nil {
		d.Kill()
		return nil, err
	}
	return d, nil
}

func (d *Daemon) waitServing(limit time.Duration) error {
	conn, err := grpc.NewClient(d.Health, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
			return fmt.Errorf("`%s` exited before serving (%v); its output:\n%s", d.command(), d.waitErr, d.Out)
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
	return fmt.Errorf("`%s` not SERVING after %v (last: %v); its output:\n%s", d.command(), limit, last, d.Out)
}

// command is the daemon's command line as a person would type it.
func (d *Daemon) command() string {
	return strings.Join(append([]string{"squawk"}, d.cmd.Args[1:]...), " ")
}

// Kill sends SIGKILL and waits for the process to end.
func (d *Daemon) Kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// Stop asks the daemon to drain (SIGTERM) and kills it if it lingers.
func (d *Daemon) Stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.Kill()
	}
}

// FreeAddr is a loopback address with a port nothing listens on right now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
