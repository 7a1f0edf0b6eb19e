package squawk

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

var upstreamSeq atomic.Int64

// uniqueUpstream names an upstream no other test (nor another run of this
// one with -count) has touched: the daemon's state outlives each test.
func uniqueUpstream(t *testing.T) string {
	return fmt.Sprintf("%s#%d", t.Name(), upstreamSeq.Add(1))
}

// upstreamClient talks to the daemon serving testdata/upstreams-policy.yaml;
// a slow daemon fails the test instead of being answered locally.
func upstreamClient(t *testing.T, opts ...Option) *Client {
	t.Helper()
	d := requireUpstreamDaemon(t)
	return newClient(t, d.addr, append([]Option{WithFallbackDisabled(), WithCallTimeout(10 * time.Second)}, opts...)...)
}

// upstreamState is the daemon's view of (profile, upstream).
func upstreamState(t *testing.T, c *Client, profile, upstream string) *squawkv1.UpstreamState {
	t.Helper()
	states, err := c.GetUpstreams(context.Background(), &squawkv1.GetUpstreamsRequest{Profile: profile})
	if err != nil {
		t.Fatalf("GetUpstreams: %v", err)
	}
	for _, s := range states {
		if s.GetUpstream() == upstream {
			if s.GetProfile() != profile {
				t.Errorf("GetUpstreams(%q) listed profile %q", profile, s.GetProfile())
			}
			return s
		}
	}
	t.Fatalf("GetUpstreams(%q) does not list %q", profile, upstream)
	return nil
}

// coolDown records a 429 with Retry-After: 2 for upstream, as an executor
// asking DecideRetry about it would.
func coolDown(t *testing.T, c *Client, upstream string) {
	t.Helper()
	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{
		Attempt: 1, HttpStatus: 429, Headers: map[string]string{"Retry-After": "2"}, Upstream: upstream,
	})
	if err != nil {
		t.Fatalf("DecideRetry: %v", err)
	}
	if d.Action != squawkv1.Action_ACTION_RETRY {
		t.Fatalf("the 429 was answered %v, want a RETRY", d)
	}
}

// callLog keeps, in order, the PolicyService methods a client called and
// the steps it ran, and the requests it sent.
type callLog struct {
	mu     sync.Mutex
	events []string
	sent   []proto.Message
}

func (l *callLog) add(event string, req proto.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event)
	if req != nil {
		l.sent = append(l.sent, proto.Clone(req))
	}
}

func (l *callLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	m, _ := req.(proto.Message)
	l.add(path.Base(method), m)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (l *callLog) dial() Option {
	return WithDialOptions(grpc.WithChainUnaryInterceptor(l.intercept))
}

func (l *callLog) snapshot() ([]string, []proto.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...), append([]proto.Message(nil), l.sent...)
}

func TestAdmitAndReportOutcome(t *testing.T) {
	c := upstreamClient(t)
	ctx := context.Background()
	u := uniqueUpstream(t)

	a, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: u, Capability: "search_hotels"})
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	// An allowed answer admits one dispatch, whether or not the daemon
	// states its permits.
	want := Admission{Allowed: true, Reason: squawkv1.Reason_REASON_ADMITTED, Permits: 1,
		BreakerState: squawkv1.BreakerState_BREAKER_STATE_CLOSED}
	// The admission's id, which the call's outcome names: 64 random bits.
	if len(a.AdmissionID) != 16 {
		t.Errorf("Admit's AdmissionID = %q, want 16 hex digits", a.AdmissionID)
	}
	a.AdmissionID = ""
	if a != want {
		t.Errorf("Admit to a new upstream = %+v, want %+v", a, want)
	}

	n, err := c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{Outcomes: []*squawkv1.Outcome{
		{Upstream: u, Success: true},
		{Upstream: u, HttpStatus: 503},
		{Success: true}, // no upstream: not recorded
	}})
	if err != nil || n != 2 {
		t.Fatalf("ReportOutcome = %d, %v; want 2 recorded", n, err)
	}
	s := upstreamState(t, c, "default", u)
	if s.GetWindowCalls() != 2 || s.GetWindowFailures() != 1 || s.GetBreakerState() != squawkv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Errorf("state after one success and one 503: %v", s)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d against the daemon", c.FallbackCount())
	}
}

func TestAdmitRefusesWhileCoolingDown(t *testing.T) {
	c := upstreamClient(t)
	u := uniqueUpstream(t)
	coolDown(t, c, u)

	a, err := c.Admit(context.Background(), &squawkv1.AdmitRequest{Upstream: u})
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if a.Allowed || a.Reason != squawkv1.Reason_REASON_UPSTREAM_COOLING_DOWN || a.Fallback {
		t.Errorf("Admit during the cool-down = %v", a)
	}
	// The daemon jitters a cool-down's refusal by up to its time left (5 s at most).
	if a.RetryAfter <= time.Second || a.RetryAfter > 4000*time.Millisecond {
		t.Errorf("RetryAfter = %v, want the rest of the 2 s Retry-After, jittered", a.RetryAfter)
	}
	if left := upstreamState(t, c, "default", u).GetCoolDownLeft().AsDuration(); left <= time.Second || left > 2*time.Second {
		t.Errorf("GetUpstreams cool_down_left = %v, want the rest of the 2 s Retry-After", left)
	}
	// Another upstream is not affected.
	if a, err := c.Admit(context.Background(), &squawkv1.AdmitRequest{Upstream: uniqueUpstream(t)}); err != nil || !a.Allowed {
		t.Errorf("Admit to another upstream = %v, %v", a, err)
	}
}

func TestUpstreamCallsRefuseBadInput(t *testing.T) {
	c := upstreamClient(t)
	ctx := context.Background()
	u := uniqueUpstream(t)
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"nil Admit", func() error { _, err := c.Admit(ctx, nil); return err }, "request"},
		{"unknown profile", func() error {
			_, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: u, Profile: "no-such-profile"})
			return err
		}, "profile"},
		{"long upstream", func() error {
			_, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: strings.Repeat("u", 257)})
			return err
		}, "upstream"},
		{"nil ReportOutcome", func() error { _, err := c.ReportOutcome(ctx, nil); return err }, "request"},
		{"no outcomes", func() error {
			_, err := c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{})
			return err
		}, "outcomes"},
		{"nil outcome", func() error {
			_, err := c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{Outcomes: []*squawkv1.Outcome{{Upstream: u}, nil}})
			return err
		}, "outcomes[1]"},
		{"bad status", func() error {
			_, err := c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{Outcomes: []*squawkv1.Outcome{{Upstream: u, HttpStatus: 42}}})
			return err
		}, "outcomes[0].http_status"},
		{"nil GetUpstreams", func() error { _, err := c.GetUpstreams(ctx, nil); return err }, "request"},
		{"unknown profile listed", func() error {
			_, err := c.GetUpstreams(ctx, &squawkv1.GetUpstreamsRequest{Profile: "no-such-profile"})
			return err
		}, "profile"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantInputError(t, tc.call(), tc.field) })
	}
	// A refused report changes nothing.
	if states, err := c.GetUpstreams(ctx, &squawkv1.GetUpstreamsRequest{}); err != nil {
		t.Fatal(err)
	} else {
		for _, s := range states {
			if s.GetUpstream() == u {
				t.Errorf("a refused call recorded %v", s)
			}
		}
	}
}

func TestUpstreamCallsFailOpen(t *testing.T) {
	c := deadClient(t)
	ctx := context.Background()

	a, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: "amadeus"})
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if !a.Allowed || a.Reason != squawkv1.Reason_REASON_ADMITTED || a.BreakerState != squawkv1.BreakerState_BREAKER_STATE_CLOSED ||
		!a.Fallback || a.RetryAfter != 0 || a.Probe {
		t.Errorf("Admit without a daemon = %v, want admitted by the fallback", a)
	}
	if code := status.Code(a.FallbackCause); code != codes.Unavailable {
		t.Errorf("FallbackCause = %v, want UNAVAILABLE", a.FallbackCause)
	}
	n, err := c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{Outcomes: []*squawkv1.Outcome{{Upstream: "amadeus", Success: true}}})
	if err != nil || n != 0 {
		t.Errorf("ReportOutcome without a daemon = %d, %v; want 0 recorded", n, err)
	}
	if c.FallbackCount() != 2 {
		t.Errorf("FallbackCount = %d, want 2 (Admit and ReportOutcome)", c.FallbackCount())
	}
	// Bad input is refused whether or not the daemon answers.
	_, err = c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{})
	wantInputError(t, err, "outcomes")
	// GetUpstreams has no fallback.
	if _, err := c.GetUpstreams(ctx, &squawkv1.GetUpstreamsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetUpstreams without a daemon: %v, want UNAVAILABLE", err)
	}
	if c.FallbackCount() != 2 {
		t.Errorf("FallbackCount = %d after a refusal and GetUpstreams, want 2", c.FallbackCount())
	}
}

func TestUpstreamCallsWithFallbackDisabled(t *testing.T) {
	c := deadClient(t, WithFallbackDisabled())
	ctx := context.Background()
	if _, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: "amadeus"}); status.Code(err) != codes.Unavailable {
		t.Errorf("Admit: %v, want UNAVAILABLE", err)
	}
	_, err := c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{Outcomes: []*squawkv1.Outcome{{Upstream: "amadeus"}}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("ReportOutcome: %v, want UNAVAILABLE", err)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d with the fallback disabled", c.FallbackCount())
	}
}

func TestAdmitOnEndedCtx(t *testing.T) {
	c := deadClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// The caller has given up: nothing is admitted, not even by the fallback.
	if _, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: "amadeus"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Admit on a cancelled ctx: %v, want context.Canceled", err)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d", c.FallbackCount())
	}
}
