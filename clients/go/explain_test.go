package squawk

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// explainDaemon is a daemon of its own serving testdata/explain-policy.yaml,
// so that go-explain's breaker and event history hold this test's alone.
func explainDaemon(t *testing.T) *Client {
	t.Helper()
	policy, err := filepath.Abs("testdata/explain-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon(mustFreeAddr(t), "--policy", policy)
	if err != nil {
		t.Fatalf("cannot run the Squawk daemon: %v", err)
	}
	t.Cleanup(d.stop)
	return newClient(t, d.addr, WithFallbackDisabled(), WithCallTimeout(10*time.Second))
}

func TestExplainDecision(t *testing.T) {
	c := explainDaemon(t)
	ctx := context.Background()
	const upstream = "go-explain"

	// An allowed Admit keeps no decision.
	allowed, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: "go-explain-other"})
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if !allowed.Allowed || allowed.DecisionID != "" {
		t.Errorf("Admit(go-explain-other) = %+v, want allowed with no DecisionID", allowed)
	}

	// Four failures in the window open go-explain's breaker.
	var outcomes []*squawkv1.Outcome
	for range 4 {
		outcomes = append(outcomes, &squawkv1.Outcome{Upstream: upstream, HttpStatus: 503})
	}
	if n, err := c.ReportOutcome(ctx, &squawkv1.ReportOutcomeRequest{Outcomes: outcomes}); err != nil || n != 4 {
		t.Fatalf("ReportOutcome = %d, %v; want 4 recorded", n, err)
	}

	refused, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: upstream})
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if refused.Allowed || refused.Reason != squawkv1.Reason_REASON_CIRCUIT_OPEN || refused.DecisionID == "" {
		t.Fatalf("Admit(%s) = %+v, want refused CIRCUIT_OPEN with a DecisionID", upstream, refused)
	}

	t.Run("the refusal explained", func(t *testing.T) {
		why, err := c.ExplainDecision(ctx, refused.DecisionID)
		if err != nil {
			t.Fatalf("ExplainDecision(%q): %v", refused.DecisionID, err)
		}
		if why.GetDecisionId() != refused.DecisionID || why.GetRpc() != "Admit" || why.GetProfile() != "default" ||
			why.GetUpstream() != upstream || why.GetReason() != squawkv1.Reason_REASON_CIRCUIT_OPEN ||
			why.GetBreakerState() != squawkv1.BreakerState_BREAKER_STATE_OPEN {
			t.Errorf("ExplainDecision = %v", why)
		}
		if why.GetExplanation() != refused.Explanation {
			t.Errorf("explanation %q, want the refusal's %q", why.GetExplanation(), refused.Explanation)
		}
		tripped := false
		for _, e := range why.GetEvents() {
			if e.GetUpstream() != upstream {
				t.Errorf("an event of another upstream: %v", e)
			}
			if e.GetBefore() == "CLOSED" && e.GetAfter() == "OPEN" {
				tripped = true
			}
		}
		if !tripped {
			t.Errorf("events %v, want the breaker's CLOSED -> OPEN among them", why.GetEvents())
		}
	})

	t.Run("Run's refusal carries the id", func(t *testing.T) {
		// The breaker is open for a minute, past the step's deadline: the
		// first refusal ends the step.
		stepCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		calls := 0
		_, err := Run(stepCtx, c, "PAR", failTimes[string](0, nil, &calls), RunOptions[string]{
			Upstream: upstream, Sleep: (&sleepRecorder{}).sleep,
		})
		var re *RunError
		if !errors.As(err, &re) {
			t.Fatalf("Run = %v, want a *RunError", err)
		}
		d := re.Decision
		if d.Action != squawkv1.Action_ACTION_FAIL || d.Reason != squawkv1.Reason_REASON_CIRCUIT_OPEN || d.DecisionID == "" || d.Fallback {
			t.Fatalf("RunError's decision %+v, want the daemon's CIRCUIT_OPEN refusal with its DecisionID", d)
		}
		if calls != 0 {
			t.Errorf("step called %d times, want none", calls)
		}
		if d.DecisionID == refused.DecisionID {
			t.Errorf("Run's refusal has the raw Admit's id %q, want its own", d.DecisionID)
		}
		why, err := c.ExplainDecision(ctx, d.DecisionID)
		if err != nil {
			t.Fatalf("ExplainDecision(%q): %v", d.DecisionID, err)
		}
		if why.GetRpc() != "Admit" || why.GetUpstream() != upstream || why.GetBreakerState() != squawkv1.BreakerState_BREAKER_STATE_OPEN {
			t.Errorf("ExplainDecision = %v", why)
		}
	})

	t.Run("a DecideRetry FAIL carries the id", func(t *testing.T) {
		d, err := c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503, Upstream: upstream})
		if err != nil {
			t.Fatalf("DecideRetry: %v", err)
		}
		if d.Action != squawkv1.Action_ACTION_FAIL || d.DecisionID == "" || d.DecisionID == refused.DecisionID {
			t.Fatalf("DecideRetry = %+v, want a FAIL with an id of its own", d)
		}
		why, err := c.ExplainDecision(ctx, d.DecisionID)
		if err != nil {
			t.Fatalf("ExplainDecision(%q): %v", d.DecisionID, err)
		}
		if why.GetRpc() != "DecideRetry" || why.GetReason() != d.Reason || why.GetUpstream() != upstream {
			t.Errorf("ExplainDecision = %v", why)
		}
	})

	t.Run("an id not kept", func(t *testing.T) {
		_, err := c.ExplainDecision(ctx, "000000-1")
		if code := status.Code(err); code != codes.NotFound {
			t.Fatalf("ExplainDecision(000000-1): %v, want NOT_FOUND", err)
		}
		if !strings.HasPrefix(err.Error(), "squawk: ExplainDecision: ") {
			t.Errorf("error %q does not name the method", err)
		}
	})

	t.Run("a bad id", func(t *testing.T) {
		for _, id := range []string{"", strings.Repeat("x", 65)} {
			_, err := c.ExplainDecision(ctx, id)
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("ExplainDecision(%q): %v, want INVALID_ARGUMENT", id, err)
			}
			wantInputError(t, err, "decision_id")
		}
	})
}

func TestExplainDecisionHasNoFallback(t *testing.T) {
	c := deadClient(t)
	if _, err := c.ExplainDecision(context.Background(), "000000-1"); status.Code(err) != codes.Unavailable {
		t.Errorf("ExplainDecision without a daemon: %v, want UNAVAILABLE", err)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d after ExplainDecision, want 0", c.FallbackCount())
	}
}

func TestFallbackKeepsNoDecisionID(t *testing.T) {
	c := deadClient(t)
	ctx := context.Background()
	d, err := c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 400, Upstream: "go-explain"})
	if err != nil || !d.Fallback || d.Action != squawkv1.Action_ACTION_FAIL || d.DecisionID != "" {
		t.Errorf("fallback DecideRetry = %+v, %v; want a local FAIL with no DecisionID", d, err)
	}
	a, err := c.Admit(ctx, &squawkv1.AdmitRequest{Upstream: "go-explain"})
	if err != nil || !a.Fallback || a.DecisionID != "" {
		t.Errorf("fallback Admit = %+v, %v; want a local admission with no DecisionID", a, err)
	}
}

// A decision id from the wire is kept only as at most 64 characters of
// printable ASCII: it is shown and sent back.
func TestDecisionIDFromTheWire(t *testing.T) {
	for _, tc := range []struct {
		name, id, want string
	}{
		{"the daemon's", "a1b2c3-42", "a1b2c3-42"},
		{"64 characters", strings.Repeat("x", 64), strings.Repeat("x", 64)},
		{"none", "", ""},
		{"65 characters", strings.Repeat("x", 65), ""},
		{"a newline", "a1b2c3-42\n", ""},
		{"an escape", "a1b2c3\x1b[31m-42", ""},
		{"a NUL", "a1b2c3\x00-42", ""},
		{"DEL", "a1b2c3-42\x7f", ""},
		{"not ASCII", "a1b2c3-4é", ""},
		{"invalid UTF-8", "a1b2c3-4\xff", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decisionFromProto(&squawkv1.DecideRetryResponse{
				Action: squawkv1.Action_ACTION_FAIL, Reason: squawkv1.Reason_REASON_CIRCUIT_OPEN, DecisionId: proto.String(tc.id),
			})
			if d.DecisionID != tc.want {
				t.Errorf("Decision.DecisionID = %q, want %q", d.DecisionID, tc.want)
			}
			if got := d.Proto().GetDecisionId(); got != tc.want {
				t.Errorf("Decision.Proto().DecisionId = %q, want %q", got, tc.want)
			}
			a := admissionFromProto(&squawkv1.AdmitResponse{
				Allowed: false, Reason: squawkv1.Reason_REASON_CIRCUIT_OPEN,
				RetryAfter: durationpb.New(time.Second), DecisionId: proto.String(tc.id),
			})
			if a.DecisionID != tc.want {
				t.Errorf("Admission.DecisionID = %q, want %q", a.DecisionID, tc.want)
			}
			// The runner's FAIL on the refusal carries what was kept.
			if got := refused(a, "refused").DecisionID; got != tc.want {
				t.Errorf("the runner's refusal carries %q, want %q", got, tc.want)
			}
		})
	}
	// An allowed answer keeps no decision, whatever the wire says.
	a := admissionFromProto(&squawkv1.AdmitResponse{Allowed: true, Reason: squawkv1.Reason_REASON_ADMITTED, DecisionId: proto.String("a1b2c3-42")})
	if a.DecisionID != "" {
		t.Errorf("an allowed Admission's DecisionID = %q, want empty", a.DecisionID)
	}
}

// A decision the runner makes of the daemon's FAIL is no longer the refusal
// the daemon kept: an error hook's resend, and its cancellation, carry no id.
func TestOverriddenDecisionKeepsNoDecisionID(t *testing.T) {
	fail := Decision{Action: squawkv1.Action_ACTION_FAIL, Reason: squawkv1.Reason_REASON_NOT_RETRYABLE_STATUS,
		ConsumesAttempt: true, DecisionID: "a1b2c3-42"}
	if got := override(fail, TierFail, 1, 3, DefaultBackoff); got.DecisionID != fail.DecisionID {
		t.Errorf("a FAIL the hook confirms carries %q, want the daemon's %q", got.DecisionID, fail.DecisionID)
	}
	resend := override(fail, TierRetry, 1, 3, DefaultBackoff)
	if resend.Action != squawkv1.Action_ACTION_RETRY || resend.DecisionID != "" {
		t.Errorf("the hook's resend = %+v, want a RETRY with no DecisionID", resend)
	}
	if got := cancelledDecision(fail); got.DecisionID != "" {
		t.Errorf("a cancelled wait carries %q, want no DecisionID", got.DecisionID)
	}
}
