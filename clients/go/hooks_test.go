package squawk

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The OnError rule, with the sentences every Squawk client writes.
func TestOverride(t *testing.T) {
	const (
		retry   = squawkv1.Action_ACTION_RETRY
		correct = squawkv1.Action_ACTION_CORRECT
		fail    = squawkv1.Action_ACTION_FAIL
	)
	decision := func(a squawkv1.Action, r squawkv1.Reason, delay time.Duration) Decision {
		return Decision{Action: a, Reason: r, Delay: delay, Explanation: "the policy's", ConsumesAttempt: a != correct}
	}
	withRetryAfter := decision(fail, squawkv1.Reason_REASON_TERMINAL_STATUS, 0)
	withRetryAfter.Classification = &squawkv1.ClassifyResponse{RetryAfter: durationpb.New(3 * time.Second)}
	cases := []struct {
		name            string
		in              Decision
		tier            Tier
		attempt, budget int
		action          squawkv1.Action
		delay           time.Duration
		explanation     string
		unchanged       bool
	}{
		{name: "fail ends a retry, reason kept",
			in: decision(retry, squawkv1.Reason_REASON_TRANSIENT_STATUS, 542*time.Millisecond), tier: TierFail, attempt: 1, budget: 3,
			action:      fail,
			explanation: "The error hook ended the step; the policy had answered ACTION_RETRY, REASON_TRANSIENT_STATUS."},
		{name: "fail ends a correction",
			in: decision(correct, squawkv1.Reason_REASON_CORRECTION_ELIGIBLE, 0), tier: TierFail, attempt: 1, budget: 3,
			action:      fail,
			explanation: "The error hook ended the step; the policy had answered ACTION_CORRECT, REASON_CORRECTION_ELIGIBLE."},
		{name: "fail leaves a fail as it is",
			in: decision(fail, squawkv1.Reason_REASON_TERMINAL_STATUS, 0), tier: TierFail, attempt: 1, budget: 3, unchanged: true},
		{name: "retry resends a fail after the default backoff",
			in: decision(fail, squawkv1.Reason_REASON_NO_CORRECTION_AVAILABLE, 0), tier: TierRetry, attempt: 1, budget: 3,
			action: retry, delay: 542 * time.Millisecond,
			explanation: "The error hook asked for a resend; the policy had answered ACTION_FAIL, REASON_NO_CORRECTION_AVAILABLE. " +
				"Resend the same payload after 542 ms, attempt 2 of 3."},
		{name: "retry resends a correction after the second attempt's backoff",
			in: decision(correct, squawkv1.Reason_REASON_CORRECTION_ELIGIBLE, 0), tier: TierRetry, attempt: 2, budget: 5,
			action: retry, delay: 1091 * time.Millisecond,
			explanation: "The error hook asked for a resend; the policy had answered ACTION_CORRECT, REASON_CORRECTION_ELIGIBLE. " +
				"Resend the same payload after 1091 ms, attempt 3 of 5."},
		{name: "retry waits the Retry-After",
			in: withRetryAfter, tier: TierRetry, attempt: 1, budget: 3,
			action: retry, delay: 3 * time.Second,
			explanation: "The error hook asked for a resend; the policy had answered ACTION_FAIL, REASON_TERMINAL_STATUS. " +
				"Resend the same payload after 3000 ms, attempt 2 of 3."},
		{name: "retry leaves a retry as it is",
			in: decision(retry, squawkv1.Reason_REASON_TRANSIENT_STATUS, 7*time.Second), tier: TierRetry, attempt: 1, budget: 3, unchanged: true},
		{name: "retry never revives a cancelled step",
			in: decision(fail, squawkv1.Reason_REASON_CANCELLED, 0), tier: TierRetry, attempt: 1, budget: 3, unchanged: true},
		{name: "retry never revives exhausted attempts",
			in: decision(fail, squawkv1.Reason_REASON_ATTEMPTS_EXHAUSTED, 0), tier: TierRetry, attempt: 1, budget: 3, unchanged: true},
		{name: "retry never waits past the deadline",
			in: decision(fail, squawkv1.Reason_REASON_DEADLINE_EXCEEDED, 0), tier: TierRetry, attempt: 1, budget: 3, unchanged: true},
		{name: "retry never goes past the budget",
			in: decision(fail, squawkv1.Reason_REASON_NO_CORRECTION_AVAILABLE, 0), tier: TierRetry, attempt: 3, budget: 3, unchanged: true},
		{name: "default follows the decision",
			in: decision(correct, squawkv1.Reason_REASON_CORRECTION_ELIGIBLE, 0), tier: TierDefault, attempt: 1, budget: 3, unchanged: true},
		{name: "an unknown tier follows the decision",
			in: decision(fail, squawkv1.Reason_REASON_TERMINAL_STATUS, 0), tier: Tier(9), attempt: 1, budget: 3, unchanged: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := override(tc.in, tc.tier, tc.attempt, tc.budget, DefaultBackoff)
			if tc.unchanged {
				if got.Action != tc.in.Action || got.Reason != tc.in.Reason || got.Delay != tc.in.Delay ||
					got.Explanation != tc.in.Explanation || got.ConsumesAttempt != tc.in.ConsumesAttempt {
					t.Errorf("got %+v, want the decision unchanged", got)
				}
				return
			}
			if got.Action != tc.action || got.Reason != tc.in.Reason || got.Delay != tc.delay || !got.ConsumesAttempt {
				t.Errorf("got %v (reason %v, consumes attempt %v), want %v after %v, reason %v, consuming an attempt",
					got, got.Reason, got.ConsumesAttempt, tc.action, tc.delay, tc.in.Reason)
			}
			if got.Explanation != tc.explanation {
				t.Errorf("explanation\n got %q\nwant %q", got.Explanation, tc.explanation)
			}
		})
	}
}

func TestInputErrorFromStatus(t *testing.T) {
	detailed, err := status.New(codes.InvalidArgument, "attempt: must be >= 1 (1-based), got 0").WithDetails(
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "requests[2].attempt", Description: "must be >= 1 (1-based), got 0"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name          string
		st            *status.Status
		field, errMsg string
	}{
		{"the BadRequest detail wins over the message", detailed,
			"requests[2].attempt", "requests[2].attempt: must be >= 1 (1-based), got 0"},
		{"without a detail, the message prefix",
			status.New(codes.InvalidArgument, "original_request.rooms[3].beds: must be a finite number, got nan"),
			"original_request.rooms[3].beds", "original_request.rooms[3].beds: must be a finite number, got nan"},
		{"a prefix with spaces is no field",
			status.New(codes.InvalidArgument, "bad input: nothing to name"),
			"", "bad input: nothing to name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := wrapCallError(context.Background(), "DecideRetry", tc.st.Err())
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an *InputError", err)
			}
			if ie.Field != tc.field || ie.Error() != tc.errMsg {
				t.Errorf("InputError{Field: %q} %q, want field %q, %q", ie.Field, ie.Error(), tc.field, tc.errMsg)
			}
			// The daemon's own status, details included, is what callers see.
			if got := status.Convert(err); got.Code() != codes.InvalidArgument || len(got.Details()) != len(tc.st.Details()) {
				t.Errorf("status %v with %d details, want InvalidArgument with %d", got.Code(), len(got.Details()), len(tc.st.Details()))
			}
		})
	}
}

func TestRunRefusesBadBudgets(t *testing.T) {
	c := deadClient(t)
	step := func(context.Context, int) (int, error) {
		t.Fatal("the step was called with options out of range")
		return 0, nil
	}
	_, err := Run(context.Background(), c, 0, step, RunOptions[int]{MaxAttempts: new(0)})
	wantInputError(t, err, "max_attempts")
	_, err = Run(context.Background(), c, 0, step, RunOptions[int]{MaxValidationRetries: new(-1)})
	wantInputError(t, err, "max_validation_retries")
	_, err = Run(context.Background(), c, 0, step, RunOptions[int]{MaxAttempts: new(1 << 40)})
	wantInputError(t, err, "max_attempts")
}
