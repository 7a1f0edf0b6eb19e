package squawk

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// scriptedClient is a client of a scriptedDaemon answering Admit with
// answers (proto3 JSON), in order.
func scriptedClient(t *testing.T, answers ...string) (*Client, *scriptedDaemon) {
	t.Helper()
	raw := make([]json.RawMessage, len(answers))
	for i, a := range answers {
		raw[i] = json.RawMessage(a)
	}
	sd := startScripted(t, raw)
	return newClient(t, sd.addr, WithCallTimeout(10*time.Second)), sd
}

// The daemon's answer is hostile input like any other from the wire: each
// duration is read into 0 to a day and the permits into 1 to 100.
func TestAdmitBoundsTheAnswer(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name, answer string
		want         Admission
	}{
		{"a negative wait is none",
			`{"allowed": true, "wait": "-5s", "permits": 1}`,
			Admission{Allowed: true, Permits: 1}},
		{"a wait of ten thousand years is a day",
			`{"allowed": true, "wait": "315576000000s", "permits": 1}`,
			Admission{Allowed: true, Wait: day, Permits: 1}},
		{"an older daemon's allowed answer without permits is one",
			`{"allowed": true, "reason": "REASON_ADMITTED"}`,
			Admission{Allowed: true, Reason: squawkv1.Reason_REASON_ADMITTED, Permits: 1}},
		{"negative permits are one",
			`{"allowed": true, "permits": -3}`,
			Admission{Allowed: true, Permits: 1}},
		{"a million permits are the most one Admit may ask, 100",
			`{"allowed": true, "permits": 1000000, "lease": "0.200s"}`,
			Admission{Allowed: true, Permits: 100, Lease: 200 * time.Millisecond}},
		{"a lease without spare permits is none",
			`{"allowed": true, "permits": 1, "lease": "5s"}`,
			Admission{Allowed: true, Permits: 1}},
		{"a lease's spacing is read",
			`{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "0.050s"}`,
			Admission{Allowed: true, Permits: 3, Lease: 200 * time.Millisecond, Spacing: 50 * time.Millisecond}},
		{"a spacing over a second is a second, the longest lease kept",
			`{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "5s"}`,
			Admission{Allowed: true, Permits: 3, Lease: 200 * time.Millisecond, Spacing: time.Second}},
		{"a negative spacing is none",
			`{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "-0.050s"}`,
			Admission{Allowed: true, Permits: 3, Lease: 200 * time.Millisecond}},
		{"a spacing without spare permits is none",
			`{"allowed": true, "permits": 1, "spacing": "0.050s"}`,
			Admission{Allowed: true, Permits: 1}},
		{"an allowed answer's slot of a declared cap is read",
			`{"allowed": true, "permits": 1, "holdsSlot": true}`,
			Admission{Allowed: true, Permits: 1, HoldsSlot: true}},
		{"a refusal holds no slot, whatever the answer says",
			`{"allowed": false, "reason": "REASON_IN_FLIGHT_CAP", "retryAfter": "0.050s", "holdsSlot": true}`,
			Admission{Reason: squawkv1.Reason_REASON_IN_FLIGHT_CAP, RetryAfter: 50 * time.Millisecond}},
		{"a refusal grants no permit and no wait",
			`{"allowed": false, "reason": "REASON_UPSTREAM_SATURATED", "retryAfter": "0.800s", "wait": "3s", "permits": 7}`,
			Admission{Reason: squawkv1.Reason_REASON_UPSTREAM_SATURATED, RetryAfter: 800 * time.Millisecond}},
		{"a shed refusal carries the daemon's explanation",
			`{"allowed": false, "reason": "REASON_UPSTREAM_SATURATED", "retryAfter": "0.100s", "explanation": "The call would wait 1.05 s."}`,
			Admission{Reason: squawkv1.Reason_REASON_UPSTREAM_SATURATED, RetryAfter: 100 * time.Millisecond,
				Explanation: "The call would wait 1.05 s."}},
		{"an explanation is cut to 512 bytes at a character boundary",
			`{"allowed": false, "reason": "REASON_UPSTREAM_SATURATED", "explanation": "` + strings.Repeat("é", 300) + `"}`,
			Admission{Reason: squawkv1.Reason_REASON_UPSTREAM_SATURATED, Explanation: strings.Repeat("é", 256)}},
		{"a refusal's retry-after of ten thousand years is a day",
			`{"allowed": false, "reason": "REASON_CIRCUIT_OPEN", "retryAfter": "315576000000s"}`,
			Admission{Reason: squawkv1.Reason_REASON_CIRCUIT_OPEN, RetryAfter: day}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := scriptedClient(t, tc.answer)
			got, err := c.Admit(context.Background(), &squawkv1.AdmitRequest{Upstream: "api.example"})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Admit = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAdmissionString(t *testing.T) {
	for _, tc := range []struct {
		a    Admission
		want string
	}{
		{Admission{Allowed: true, Permits: 1, Wait: 250 * time.Millisecond}, "ADMITTED after 250ms (breaker CLOSED)"},
		{Admission{Allowed: true, Permits: 4, Lease: time.Second}, "ADMITTED x4 for 1s (breaker CLOSED)"},
		{Admission{Reason: squawkv1.Reason_REASON_UPSTREAM_SATURATED, RetryAfter: 800 * time.Millisecond},
			"REFUSED for 800ms (UPSTREAM_SATURATED, breaker CLOSED)"},
	} {
		tc.a.BreakerState = squawkv1.BreakerState_BREAKER_STATE_CLOSED
		if got := tc.a.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.a, got, tc.want)
		}
	}
}

// A cost the daemon would refuse is refused before anything is sent.
func TestRunRefusesACostOutOfRange(t *testing.T) {
	for _, cost := range []float64{math.NaN(), -1, math.Inf(1), math.Inf(-1), 1e9 + 1} {
		c, sd := scriptedClient(t)
		called := false
		_, err := Run(context.Background(), c, 1, func(context.Context, int) (int, error) {
			called = true
			return 0, nil
		}, RunOptions[int]{Upstream: "api.example", Cost: cost})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "cost" {
			t.Errorf("cost %v: Run = %v, want an *InputError naming cost", cost, err)
		}
		if called || len(sd.admitted()) != 0 {
			t.Errorf("cost %v: the step ran (%v) or Admit was asked (%d)", cost, called, len(sd.admitted()))
		}
	}
	// The top of the range is a cost.
	c, sd := scriptedClient(t, `{"allowed": true, "permits": 1}`)
	if _, err := Run(context.Background(), c, 1, func(context.Context, int) (int, error) { return 0, nil },
		RunOptions[int]{Upstream: "api.example", Cost: 1e9}); err != nil {
		t.Fatalf("cost 1e9: %v", err)
	}
	if got := sd.admitted()[0].GetCost(); got != 1e9 {
		t.Errorf("Admit's cost = %v, want 1e9", got)
	}
}

// The wire's deadline is at most a day: a step with two days left sends a
// day, which the pace never waits past anyway.
func TestRunSendsADeadlineOfAtMostADay(t *testing.T) {
	c, sd := scriptedClient(t, `{"allowed": true, "permits": 1}`)
	ctx, cancel := context.WithTimeout(context.Background(), 48*time.Hour)
	defer cancel()
	if _, err := Run(ctx, c, 1, func(context.Context, int) (int, error) { return 0, nil },
		RunOptions[int]{Upstream: "api.example"}); err != nil {
		t.Fatal(err)
	}
	if got := sd.admitted()[0].GetDeadline().AsDuration(); got != 24*time.Hour {
		t.Errorf("Admit's deadline = %v, want 24h", got)
	}
}

// Without a deadline, a daemon's absurd wait is slept as a day at most,
// and an ended ctx cuts it: the step is cancelled, never dispatched.
func TestRunCancelledDuringThePacedWait(t *testing.T) {
	c, _ := scriptedClient(t, `{"allowed": true, "wait": "315576000000s", "permits": 1}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var slept []time.Duration
	called := false
	_, err := Run(ctx, c, 1, func(context.Context, int) (int, error) {
		called = true
		return 0, nil
	}, RunOptions[int]{Upstream: "api.example", Sleep: func(ctx context.Context, d time.Duration) error {
		slept = append(slept, d)
		cancel()
		return ctx.Err()
	}})
	if len(slept) != 1 || slept[0] != 24*time.Hour {
		t.Errorf("slept %v, want one wait of 24h", slept)
	}
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Reason != squawkv1.Reason_REASON_CANCELLED || called {
		t.Fatalf("Run = %v (step called: %v), want a cancelled step never dispatched", err, called)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want it to match context.Canceled", err)
	}
}

// admitted is every Admit request the server has seen.
func (sd *scriptedDaemon) admitted() []*squawkv1.AdmitRequest {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	return append([]*squawkv1.AdmitRequest(nil), sd.admits...)
}
