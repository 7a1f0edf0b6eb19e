package squawk

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// fakeDaemon is a tiny in-test PolicyService that records what arrives and
// answers DecideRetry with a scripted function.
type fakeDaemon struct {
	squawkv1.UnimplementedPolicyServiceServer
	addr   string
	decide func(ctx context.Context, req *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error)

	mu       sync.Mutex
	metadata []metadata.MD
	requests []*squawkv1.DecideRetryRequest
}

func startFake(t *testing.T, decide func(context.Context, *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error)) *fakeDaemon {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDaemon{addr: l.Addr().String(), decide: decide}
	srv := grpc.NewServer()
	squawkv1.RegisterPolicyServiceServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return f
}

func (f *fakeDaemon) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metadata = append(f.metadata, md)
}

func (f *fakeDaemon) DecideRetry(ctx context.Context, req *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
	f.record(ctx)
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	return f.decide(ctx, req)
}

func (f *fakeDaemon) Classify(ctx context.Context, req *squawkv1.ClassifyRequest) (*squawkv1.ClassifyResponse, error) {
	f.record(ctx)
	return &squawkv1.ClassifyResponse{Code: "FAKE"}, nil
}

func (f *fakeDaemon) seen() ([]metadata.MD, []*squawkv1.DecideRetryRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metadata.MD(nil), f.metadata...), append([]*squawkv1.DecideRetryRequest(nil), f.requests...)
}

func answer(action squawkv1.Action, reason squawkv1.Reason, delay time.Duration) func(context.Context, *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
	return func(context.Context, *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
		return &squawkv1.DecideRetryResponse{Action: action, Reason: reason, Delay: durationpb.New(delay), ConsumesAttempt: action != squawkv1.Action_ACTION_CORRECT}, nil
	}
}

func newClient(t *testing.T, addr string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTraceContextReachesServer(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_FAIL, squawkv1.Reason_REASON_TERMINAL_STATUS, 0))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))

	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	ctx = metadata.AppendToOutgoingContext(ctx, "x-executor", "e1")

	if _, err := c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 401}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Classify(ctx, &squawkv1.ClassifyRequest{HttpStatus: 401}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PolicyService().DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	// Without a span in ctx nothing is invented.
	if _, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1}); err != nil {
		t.Fatal(err)
	}

	mds, _ := f.seen()
	if len(mds) != 4 {
		t.Fatalf("server saw %d calls, want 4", len(mds))
	}
	const want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i, md := range mds[:3] {
		if got := md.Get("traceparent"); len(got) != 1 || got[0] != want {
			t.Errorf("call %d: traceparent = %q, want %q", i, got, want)
		}
		if got := md.Get("x-executor"); len(got) != 1 || got[0] != "e1" {
			t.Errorf("call %d: the caller's own metadata was lost: %q", i, got)
		}
	}
	if got := mds[3].Get("traceparent"); len(got) != 0 {
		t.Errorf("traceparent %q sent without a span in ctx", got)
	}
}

func TestDaemonAnswerIsNotFallback(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_RETRY, squawkv1.Reason_REASON_TRANSIENT_STATUS, 1234*time.Millisecond))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if err != nil {
		t.Fatal(err)
	}
	if d.Fallback || d.Action != squawkv1.Action_ACTION_RETRY || d.Delay != 1234*time.Millisecond {
		t.Errorf("got %+v", d)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d", c.FallbackCount())
	}
}

func TestFallbackWhenDaemonTooSlow(t *testing.T) {
	f := startFake(t, func(ctx context.Context, req *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
		return answer(squawkv1.Action_ACTION_FAIL, squawkv1.Reason_REASON_TERMINAL_STATUS, 0)(ctx, req)
	})
	c := newClient(t, f.addr, WithCallTimeout(100*time.Millisecond))
	start := time.Now()
	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("DecideRetry took %v with a 100ms call timeout", elapsed)
	}
	if !d.Fallback || status.Code(d.FallbackCause) != codes.DeadlineExceeded {
		t.Errorf("want a fallback decision caused by DEADLINE_EXCEEDED, got %+v", d)
	}
	if d.Action != squawkv1.Action_ACTION_RETRY || d.Delay != 542*time.Millisecond {
		t.Errorf("fallback decision %v, want RETRY after 542ms", d)
	}
	if c.FallbackCount() != 1 {
		t.Errorf("FallbackCount = %d, want 1", c.FallbackCount())
	}
}

func TestFallbackOnUnavailableAnswer(t *testing.T) {
	f := startFake(t, func(context.Context, *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
		return nil, status.Error(codes.Unavailable, "draining")
	})
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 401})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Fallback || d.Reason != squawkv1.Reason_REASON_TERMINAL_STATUS {
		t.Errorf("got %+v", d)
	}
}

// A status that judges the caller is not papered over (the runner vectors
// pin the whole table, INTERNAL falling back among it).
func TestNoFallbackOnOtherErrors(t *testing.T) {
	f := startFake(t, func(context.Context, *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
		return nil, status.Error(codes.PermissionDenied, "boom")
	})
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	_, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("err = %v, want code PermissionDenied through the wrapping", err)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d, want 0", c.FallbackCount())
	}
}

func TestFallbackDisabled(t *testing.T) {
	c := deadClient(t, WithFallbackDisabled())
	_, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Fatalf("err = %v (code %v), want UNAVAILABLE or DEADLINE_EXCEEDED", err, code)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d, want 0", c.FallbackCount())
	}
}

func TestEndedContextIsAnErrorNotAFallback(t *testing.T) {
	c := deadClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want one matching context.Canceled", err)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d, want 0", c.FallbackCount())
	}
}

// The caller's own cancellation is not a daemon that did not decide: a ctx
// cancelled while the call is in flight ends it with ctx's error, even though
// a CANCELLED the daemon answers now takes the fallback.
func TestCancellingTheCallIsAnErrorNotAFallback(t *testing.T) {
	started := make(chan struct{})
	f := startFake(t, func(ctx context.Context, _ *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
		close(started)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	})
	c := newClient(t, f.addr, WithCallTimeout(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if !errors.Is(err, context.Canceled) || status.Code(err) != codes.Canceled {
		t.Fatalf("err = %v, want one matching context.Canceled with code CANCELLED", err)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d, want 0", c.FallbackCount())
	}
}

func TestNilRequest(t *testing.T) {
	c := deadClient(t)
	_, err := c.DecideRetry(context.Background(), nil)
	checkInvalid(t, err, "request")
	_, err = c.Classify(context.Background(), nil)
	checkInvalid(t, err, "request")
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := New("127.0.0.1:1", WithCallTimeout(0)); err == nil {
		t.Error("WithCallTimeout(0) accepted")
	}
	if _, err := New("127.0.0.1:1", WithPropagator(nil)); err == nil {
		t.Error("WithPropagator(nil) accepted")
	}
}

func TestFallbackRetryAfterHTTPDate(t *testing.T) {
	now := time.Date(2015, 10, 21, 7, 27, 30, 0, time.UTC)
	c := deadClient(t, WithClock(func() time.Time { return now }))
	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{
		Attempt: 1, HttpStatus: 503,
		Headers: map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Delay != 30*time.Second || d.Classification.GetRetryAfter().AsDuration() != 30*time.Second {
		t.Errorf("got %v, want RETRY after 30s", d)
	}
}
