package squawk

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// A client connects before its first call: otherwise that call spends its
// 50 ms on the handshake and gets the fallback's answer instead of the
// daemon's. GetState and WaitForStateChange only watch; neither connects.
func TestNewConnectsBeforeTheFirstCall(t *testing.T) {
	d := requireDaemon(t)
	c := newClient(t, d.addr)
	// Generous: the machine may be loaded; a lazy channel never leaves Idle.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := c.conn.GetState(); s != connectivity.Ready; s = c.conn.GetState() {
		if !c.conn.WaitForStateChange(ctx, s) {
			t.Fatalf("a client built for %s and given no call is %v after 10 s, want READY", d.addr, s)
		}
	}
}

// Connecting at once must not make a missing daemon an error: New still
// returns a client, and its decisions come from the local fallback.
func TestNewWithoutADaemonStillAnswersLocally(t *testing.T) {
	c := newClient(t, mustFreeAddr(t))
	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Fallback || d.Action != squawkv1.Action_ACTION_RETRY {
		t.Fatalf("got %v (fallback %v), want a fallback RETRY", d.Action, d.Fallback)
	}
}

// Given no target, New dials SQUAWK_ADDRESS; a target given wins over it;
// with neither, the daemon's default address.
func TestNewWithoutATargetReadsSquawkAddress(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_FAIL, squawkv1.Reason_REASON_TERMINAL_STATUS, 0))
	t.Setenv("SQUAWK_ADDRESS", f.addr)
	req := &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503}
	fromEnv := newClient(t, "", WithCallTimeout(5*time.Second))
	if d, err := fromEnv.DecideRetry(context.Background(), req); err != nil || d.Fallback {
		t.Fatalf("got %+v, %v; want the daemon's answer from SQUAWK_ADDRESS", d, err)
	}
	explicit := newClient(t, mustFreeAddr(t), WithCallTimeout(5*time.Second))
	if d, err := explicit.DecideRetry(context.Background(), req); err != nil || !d.Fallback {
		t.Fatalf("got %+v, %v; want a fallback answer: the explicit target has no daemon", d, err)
	}
	t.Setenv("SQUAWK_ADDRESS", "")
	if got := newClient(t, "").conn.Target(); got != "127.0.0.1:50051" {
		t.Fatalf("target %q, want 127.0.0.1:50051", got)
	}
}
