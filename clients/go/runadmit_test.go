package squawk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// loggedStep is a step that logs its dispatch in l, fails with the errors
// in fails first, then succeeds after taking work.
func loggedStep(l *callLog, work time.Duration, fails ...error) func(context.Context, string) (string, error) {
	calls := 0
	return func(_ context.Context, p string) (string, error) {
		l.add("step", nil)
		calls++
		if calls <= len(fails) {
			return "", fails[calls-1]
		}
		time.Sleep(work)
		return "done " + p, nil
	}
}

func TestRunAdmitsEachDispatchAndReportsSuccess(t *testing.T) {
	var log callLog
	c := upstreamClient(t, log.dial())
	u := uniqueUpstream(t)
	var rec sleepRecorder
	const work = 30 * time.Millisecond

	got, err := Run(context.Background(), c, "PAR", loggedStep(&log, work, &StepError{HTTPStatus: 503}), RunOptions[string]{
		Upstream: u, Capability: "search_hotels", Sleep: rec.sleep,
	})
	if err != nil || got != "done PAR" {
		t.Fatalf("Run = %q, %v", got, err)
	}
	// The success report waits for its batch; Close sends it.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	events, sent := log.snapshot()
	want := []string{"Admit", "step", "DecideRetry", "Admit", "step", "ReportOutcome"}
	if !slices.Equal(events, want) {
		t.Fatalf("calls %v, want %v", events, want)
	}
	for _, m := range sent {
		switch req := m.(type) {
		case *squawkv1.AdmitRequest:
			if req.GetUpstream() != u || req.GetCapability() != "search_hotels" || req.GetProfile() != "" {
				t.Errorf("Admit request %v", req)
			}
		case *squawkv1.DecideRetryRequest:
			if req.GetUpstream() != u {
				t.Errorf("DecideRetry request without the upstream: %v", req)
			}
		case *squawkv1.ReportOutcomeRequest:
			if len(req.GetOutcomes()) != 1 {
				t.Fatalf("ReportOutcome request %v, want one outcome", req)
			}
			o := req.GetOutcomes()[0]
			if o.GetUpstream() != u || o.GetCapability() != "search_hotels" || !o.GetSuccess() ||
				o.GetHttpStatus() != 0 || o.GetTransportFailure() {
				t.Errorf("reported %v, want the success", o)
			}
			if l := o.GetLatency().AsDuration(); l < work || l > work+5*time.Second {
				t.Errorf("reported latency %v, want the step's duration (at least %v)", l, work)
			}
		}
	}
	// The daemon saw both dispatches: the 503 through DecideRetry, the
	// success through ReportOutcome.
	s := upstreamState(t, upstreamClient(t), "default", u) // c is closed
	if s.GetWindowCalls() != 2 || s.GetWindowFailures() != 1 {
		t.Errorf("state after a 503 and a success: %v", s)
	}
}

func TestRunWithoutUpstreamNeverAsksAdmit(t *testing.T) {
	var log callLog
	c := newClient(t, requireDaemon(t).addr, log.dial(), WithFallbackDisabled(), WithCallTimeout(10*time.Second))
	_, err := Run(context.Background(), c, "PAR", loggedStep(&log, 0, &StepError{HTTPStatus: 503}), RunOptions[string]{
		Capability: "search_hotels", Sleep: (&sleepRecorder{}).sleep,
	})
	if err != nil {
		t.Fatal(err)
	}
	if events, _ := log.snapshot(); !slices.Equal(events, []string{"step", "DecideRetry", "step"}) {
		t.Errorf("calls %v, want the step and DecideRetry only", events)
	}
}

func TestRunWaitsOutACoolDown(t *testing.T) {
	c := upstreamClient(t)
	u := uniqueUpstream(t)
	coolDown(t, c, u)

	// The recording sleep really waits here: the dispatch must come after
	// the cool-down, which only the daemon's clock ends.
	var waits []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return sleepCtx(ctx, d)
	}
	var dispatched []time.Duration
	start := time.Now()
	step := func(context.Context, string) (string, error) {
		dispatched = append(dispatched, time.Since(start))
		return "ok", nil
	}
	if _, err := Run(context.Background(), c, "PAR", step, RunOptions[string]{Upstream: u, Sleep: sleep}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The daemon jitters a cool-down's refusal by up to its time left (5 s at most).
	if len(waits) != 1 || waits[0] <= time.Second || waits[0] > 4000*time.Millisecond {
		t.Fatalf("waits %v, want one wait for the rest of the 2 s Retry-After", waits)
	}
	if len(dispatched) != 1 || dispatched[0] < waits[0] {
		t.Errorf("dispatched at %v, want once, after the %v wait", dispatched, waits[0])
	}
}

func TestRunRefusedPastTheDeadlineFailsAtOnce(t *testing.T) {
	c := upstreamClient(t)
	u := uniqueUpstream(t)
	coolDown(t, c, u)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var rec sleepRecorder
	calls := 0
	start := time.Now()
	_, err := Run(ctx, c, "PAR", failTimes[string](0, nil, &calls), RunOptions[string]{Upstream: u, Sleep: rec.sleep})
	if elapsed := time.Since(start); elapsed > 500*time.Millisecond {
		t.Errorf("Run took %v; a refusal past the deadline must end the step at once", elapsed)
	}
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("Run = %v, want a *RunError", err)
	}
	d := re.Decision
	if d.Action != squawkv1.Action_ACTION_FAIL || d.Reason != squawkv1.Reason_REASON_UPSTREAM_COOLING_DOWN ||
		d.Delay != 0 || !d.ConsumesAttempt || d.Fallback {
		t.Errorf("decision %+v, want a FAIL with the refusal's reason", d)
	}
	prefix := fmt.Sprintf("The pod refused the dispatch to %s: REASON_UPSTREAM_COOLING_DOWN; it admits again in ", u)
	if !strings.HasPrefix(d.Explanation, prefix) || !strings.HasSuffix(d.Explanation, " ms, past the step's deadline.") {
		t.Errorf("explanation %q", d.Explanation)
	}
	// The daemon jitters a cool-down's refusal by up to its time left (5 s at most).
	if d.RetryAfter <= time.Second || d.RetryAfter > 4000*time.Millisecond {
		t.Errorf("RetryAfter = %v, want the rest of the 2 s Retry-After, jittered", d.RetryAfter)
	}
	if calls != 0 || re.Calls != 0 || re.Err != nil || re.Cause != nil || len(rec.waits) != 0 {
		t.Errorf("step called %d times, RunError %+v, waits %v; want no call and no wait", calls, re, rec.waits)
	}
}

// tripped opens the breaker of upstream under the policy file's "tripwire"
// profile, where one counted failure opens it for an hour.
func tripped(t *testing.T, c *Client, upstream string) {
	t.Helper()
	n, err := c.ReportOutcome(context.Background(), &squawkv1.ReportOutcomeRequest{Outcomes: []*squawkv1.Outcome{
		{Upstream: upstream, Profile: "tripwire", HttpStatus: 503},
	}})
	if err != nil || n != 1 {
		t.Fatalf("ReportOutcome = %d, %v", n, err)
	}
	if s := upstreamState(t, c, "tripwire", upstream); s.GetBreakerState() != squawkv1.BreakerState_BREAKER_STATE_OPEN {
		t.Fatalf("the breaker did not open: %v", s)
	}
}

func TestRunEndsAfterTheBudgetOfRefusals(t *testing.T) {
	var log callLog
	c := upstreamClient(t, log.dial())
	u := uniqueUpstream(t)
	tripped(t, c, u)
	before, _ := log.snapshot()

	var rec sleepRecorder
	calls := 0
	_, err := Run(context.Background(), c, "PAR", failTimes[string](0, nil, &calls), RunOptions[string]{
		Upstream: u, Profile: "tripwire", MaxAttempts: new(2), Sleep: rec.sleep,
	})
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("Run = %v, want a *RunError", err)
	}
	// Two refusals waited (the attempt budget), the third ends the step.
	after, _ := log.snapshot()
	if asked := after[len(before):]; !slices.Equal(asked, []string{"Admit", "Admit", "Admit"}) {
		t.Errorf("calls %v, want Admit three times", asked)
	}
	if len(rec.waits) != 2 {
		t.Fatalf("waits %v, want 2", rec.waits)
	}
	for _, w := range rec.waits {
		// The daemon jitters a refusal's wait by 5 s at most.
		if w <= 59*time.Minute || w > time.Hour+5*time.Second {
			t.Errorf("waited %v, want the rest of the breaker's hour, jittered", w)
		}
	}
	d := re.Decision
	if d.Action != squawkv1.Action_ACTION_FAIL || d.Reason != squawkv1.Reason_REASON_CIRCUIT_OPEN || d.Delay != 0 || !d.ConsumesAttempt {
		t.Errorf("decision %+v, want a FAIL with CIRCUIT_OPEN", d)
	}
	if want := fmt.Sprintf("The pod refused the dispatch to %s 3 times in a row: REASON_CIRCUIT_OPEN.", u); d.Explanation != want {
		t.Errorf("explanation %q, want %q", d.Explanation, want)
	}
	if calls != 0 || re.Calls != 0 || re.Err != nil || re.Cause != nil {
		t.Errorf("step called %d times, RunError %+v; want no call", calls, re)
	}
}

func TestRunRefusedResendKeepsTheLastError(t *testing.T) {
	c := upstreamClient(t)
	u := uniqueUpstream(t)
	// The first dispatch is admitted; its 503 opens the breaker, and the
	// daemon's DecideRetry already fails the resend with the time left.
	var log callLog
	_, err := Run(context.Background(), c, "PAR", loggedStep(&log, 0, &StepError{HTTPStatus: 503}), RunOptions[string]{
		Upstream: u, Profile: "tripwire", Sleep: (&sleepRecorder{}).sleep,
	})
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("Run = %v, want a *RunError", err)
	}
	if re.Decision.Reason != squawkv1.Reason_REASON_CIRCUIT_OPEN || re.Calls != 1 {
		t.Errorf("RunError %+v, want CIRCUIT_OPEN after 1 call", re)
	}
	// The daemon jitters a refusal's wait by 5 s at most.
	if ra := re.Decision.RetryAfter; ra <= 59*time.Minute || ra > time.Hour+5*time.Second {
		t.Errorf("RetryAfter = %v, want the rest of the breaker's hour, jittered", ra)
	}
	var se *StepError
	if !errors.As(err, &se) || se.HTTPStatus != 503 {
		t.Errorf("err = %v does not carry the step's 503", err)
	}
	// An OnError hook forcing the resend meets the pod's refusals instead;
	// the step's 503 stays the last error.
	u = uniqueUpstream(t)
	calls := 0
	_, err = Run(context.Background(), c, "PAR", failTimes[string](1, &StepError{HTTPStatus: 503}, &calls), RunOptions[string]{
		Upstream: u, Profile: "tripwire", MaxAttempts: new(2), Sleep: (&sleepRecorder{}).sleep,
		OnError: func(ErrorInfo) Tier { return TierRetry },
	})
	if !errors.As(err, &re) {
		t.Fatalf("Run = %v, want a *RunError", err)
	}
	want := fmt.Sprintf("The pod refused the dispatch to %s 3 times in a row: REASON_CIRCUIT_OPEN.", u)
	if re.Decision.Reason != squawkv1.Reason_REASON_CIRCUIT_OPEN || re.Decision.Explanation != want || calls != 1 || re.Calls != 1 {
		t.Errorf("RunError %+v after %d calls, want the refusals after 1 call", re, calls)
	}
	if !errors.As(err, &se) || se.HTTPStatus != 503 {
		t.Errorf("err = %v does not carry the step's 503", err)
	}
}

func TestRunCancelledWhileRefused(t *testing.T) {
	c := upstreamClient(t)
	u := uniqueUpstream(t)
	tripped(t, c, u)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err := Run(ctx, c, "PAR", failTimes[string](0, nil, &calls), RunOptions[string]{
		Upstream: u, Profile: "tripwire",
		Sleep: func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want one matching context.Canceled", err)
	}
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Action != squawkv1.Action_ACTION_FAIL || re.Decision.Reason != squawkv1.Reason_REASON_CANCELLED {
		t.Errorf("err = %#v, want a RunError with a CANCELLED FAIL", err)
	}
	if calls != 0 {
		t.Errorf("step called %d times", calls)
	}
}

func TestRunAdmitInputErrorStopsBeforeTheStep(t *testing.T) {
	c := upstreamClient(t)
	calls := 0
	_, err := Run(context.Background(), c, "PAR", failTimes[string](0, nil, &calls), RunOptions[string]{
		Upstream: uniqueUpstream(t), Profile: "no-such-profile",
	})
	wantInputError(t, err, "profile")
	if calls != 0 {
		t.Errorf("step called %d times", calls)
	}
}

func TestRunFailsOpenWithoutDaemon(t *testing.T) {
	var log callLog
	c := deadClient(t, log.dial())
	var rec sleepRecorder
	got, err := Run(context.Background(), c, "PAR", loggedStep(&log, 0, &StepError{HTTPStatus: 503}), RunOptions[string]{
		Upstream: "amadeus", Sleep: rec.sleep,
	})
	if err != nil || got != "done PAR" {
		t.Fatalf("Run = %q, %v; want the step's result", got, err)
	}
	c.Close() // sends the held report, which fails open
	events, _ := log.snapshot()
	if want := []string{"Admit", "step", "DecideRetry", "Admit", "step", "ReportOutcome"}; !slices.Equal(events, want) {
		t.Errorf("calls %v, want %v", events, want)
	}
	if want := []time.Duration{DefaultBackoff.Delay(1)}; !slices.Equal(rec.waits, want) {
		t.Errorf("waits %v, want %v", rec.waits, want)
	}
	// Two admissions, one decision and one report, all without the daemon.
	if c.FallbackCount() != 4 {
		t.Errorf("FallbackCount = %d, want 4", c.FallbackCount())
	}
}
