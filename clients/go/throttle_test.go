package squawk

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// notSent says whether err is the throttle's local refusal.
func notSent(err error) bool {
	return status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "squawk: not sent:")
}

// windowTotals sums every bucket of method's window, whatever its second
// (a test takes far less than the window's ten seconds).
func windowTotals(th *throttle, method string) (requests, accepts int) {
	th.mu.Lock()
	defer th.mu.Unlock()
	for _, b := range th.windows[method] {
		requests += b.requests
		accepts += b.accepts
	}
	return requests, accepts
}

// A daemon that refuses every call for load soon gets few of them: the
// first 20, then about 1 in (requests + 1) (about 22 of 200 in all), and
// every DecideRetry, sent or not, is answered by the local fallback.
func TestThrottleOverloadedDaemon(t *testing.T) {
	addr, calls := answeringCounted(t, codes.ResourceExhausted)
	// Generous: a busy machine must not turn an answer into a timeout.
	c := newClient(t, addr, WithCallTimeout(5*time.Second))
	want, err := deadClient(t).DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if err != nil || !want.Fallback {
		t.Fatalf("the fallback's own decision: %+v, %v", want, err)
	}
	const n = 200
	refused := 0
	for i := range n {
		d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !d.Fallback || d.Action != want.Action || d.Reason != want.Reason || d.Delay != want.Delay {
			t.Fatalf("call %d: %+v, want the fallback's %+v", i, d, want)
		}
		if status.Code(d.FallbackCause) != codes.ResourceExhausted {
			t.Fatalf("call %d: fallback cause %v, want RESOURCE_EXHAUSTED", i, d.FallbackCause)
		}
		if notSent(d.FallbackCause) {
			refused++
		}
	}
	got := calls.Load()
	t.Logf("the daemon received %d of %d calls", got, n)
	if got < throttleMinRequests || got > 40 {
		t.Errorf("the daemon received %d of %d calls, want 20 to 40 (about 22)", got, n)
	}
	if int64(refused) != n-got {
		t.Errorf("%d calls were refused locally, want %d (the ones the daemon did not get)", refused, n-got)
	}
	if fc := c.FallbackCount(); fc != n {
		t.Errorf("FallbackCount %d, want %d", fc, n)
	}
	if r, a := windowTotals(c.throttle, "DecideRetry"); r != n || a != 0 {
		t.Errorf("window: %d requests, %d accepts; want %d, 0", r, a, n)
	}
}

// A daemon that answers gets every call.
func TestThrottleAnsweringDaemon(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_RETRY, squawkv1.Reason_REASON_TRANSIENT_STATUS, time.Second))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	const n = 200
	for i := range n {
		d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
		if err != nil || d.Fallback {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
	}
	if _, reqs := f.seen(); len(reqs) != n {
		t.Errorf("the daemon received %d of %d calls", len(reqs), n)
	}
}

// Every method is throttled, on a window of its own, and a local refusal
// ends as the daemon's RESOURCE_EXHAUSTED would: Admit fails open, Classify
// returns the error.
func TestThrottleEveryMethod(t *testing.T) {
	addr, calls := answeringCounted(t, codes.ResourceExhausted)
	c := newClient(t, addr, WithCallTimeout(5*time.Second))
	const n = 100
	refused := 0
	for i := range n {
		a, err := c.Admit(context.Background(), &squawkv1.AdmitRequest{Upstream: "api.example"})
		if err != nil || !a.Fallback || !a.Allowed {
			t.Fatalf("Admit %d: %+v, %v; want failed open", i, a, err)
		}
		if notSent(a.FallbackCause) {
			refused++
		}
	}
	admits := calls.Load()
	if admits > 40 || int64(refused) != n-admits {
		t.Errorf("Admit: the daemon received %d of %d calls and %d were refused locally; want at most 40, the rest refused", admits, n, refused)
	}
	refused = 0
	for i := range n {
		_, err := c.Classify(context.Background(), &squawkv1.ClassifyRequest{})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("Classify %d: %v, want RESOURCE_EXHAUSTED", i, err)
		}
		if notSent(err) {
			refused++
			if !strings.Contains(err.Error(), "of the last") || !strings.Contains(err.Error(), "Classify calls") {
				t.Fatalf("Classify %d: %v does not say what the daemon answered", i, err)
			}
		}
	}
	// Classify's window is its own: its first 20 calls are all sent.
	if classifies := calls.Load() - admits; classifies < throttleMinRequests || classifies > 40 || int64(refused) != n-classifies {
		t.Errorf("Classify: the daemon received %d of %d calls and %d were refused locally", classifies, n, refused)
	}
	// Raw calls on the client's connection pass through it too.
	before := calls.Load()
	for range n {
		if _, err := c.PolicyService().CheckDispatch(context.Background(), &squawkv1.CheckDispatchRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("CheckDispatch: %v", err)
		}
	}
	if sent := calls.Load() - before; sent > 40 {
		t.Errorf("CheckDispatch: the daemon received %d of %d raw calls", sent, n)
	}
}

// A call its caller cancels is not counted (no evidence of the daemon's
// load); a CANCELLED from the server counts as answered.
func TestThrottleCallerCancellation(t *testing.T) {
	f := startFake(t, func(ctx context.Context, _ *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503}); !errors.Is(err, context.Canceled) {
		t.Fatalf("DecideRetry on a cancelled ctx: %v, want context.Canceled", err)
	}
	if r, a := windowTotals(c.throttle, "DecideRetry"); r != 0 || a != 0 {
		t.Errorf("after the caller's cancellation: %d requests, %d accepts; want 0, 0", r, a)
	}

	s := newClient(t, answering(t, codes.Canceled), WithCallTimeout(5*time.Second))
	if d, err := s.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503}); err != nil || !d.Fallback {
		t.Fatalf("DecideRetry on a server's CANCELLED: %+v, %v; want the fallback", d, err)
	}
	if r, a := windowTotals(s.throttle, "DecideRetry"); r != 1 || a != 1 {
		t.Errorf("after the server's CANCELLED: %d requests, %d accepts; want 1, 1", r, a)
	}

	// A slow daemon's DEADLINE_EXCEEDED is no answer in time.
	slow := newClient(t, f.addr, WithCallTimeout(20*time.Millisecond))
	if d, err := slow.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503}); err != nil || !d.Fallback {
		t.Fatalf("DecideRetry on a slow daemon: %+v, %v; want the fallback", d, err)
	}
	if r, a := windowTotals(slow.throttle, "DecideRetry"); r != 1 || a != 0 {
		t.Errorf("after a timeout: %d requests, %d accepts; want 1, 0", r, a)
	}
}
