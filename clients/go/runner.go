package squawk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// StepError is how a step reports a failed upstream call that got an HTTP
// answer (or knowingly got none). Any other error a step returns counts as a
// transport failure.
type StepError struct {
	// HTTPStatus is the component's HTTP status; 0 = none or unknown.
	HTTPStatus int
	// TransportFailure is true when no HTTP response arrived.
	TransportFailure bool
	// Body is the component's raw response body (at most 1 MiB is sent);
	// an error envelope {"success": false, "error": {"retryable": false}}
	// in it stops every retry.
	Body []byte
	// Headers are the response headers (Retry-After, grpc-retry-pushback-ms).
	Headers map[string]string
	// Err is the underlying error, if any.
	Err error
}

func (e *StepError) Error() string {
	var b strings.Builder
	switch {
	case e.TransportFailure || e.HTTPStatus == 0:
		b.WriteString("transport failure")
	default:
		fmt.Fprintf(&b, "HTTP %d", e.HTTPStatus)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *StepError) Unwrap() error { return e.Err }

// Tier is an OnError hook's verdict.
type Tier int

const (
	// TierDefault follows the decision.
	TierDefault Tier = iota
	// TierRetry resends the same parameters even when the decision said
	// FAIL or CORRECT, after the decided delay or else the default backoff;
	// never after cancellation and never past the attempt budget.
	TierRetry
	// TierFail ends the step even when the decision said RETRY or CORRECT.
	TierFail
)

func (t Tier) String() string {
	switch t {
	case TierDefault:
		return "default"
	case TierRetry:
		return "retry"
	case TierFail:
		return "fail"
	}
	return fmt.Sprintf("Tier(%d)", int(t))
}

// ErrorInfo is what an OnError hook sees after a failed attempt.
type ErrorInfo struct {
	// Attempt is the 1-based number of the attempt that just failed.
	Attempt int
	// CorrectionsUsed is how many corrections were applied so far.
	CorrectionsUsed int
	// Err is the error the step returned.
	Err error
	// Request is what was sent to DecideRetry.
	Request *squawkv1.DecideRetryRequest
	// Decision is the policy's answer (daemon or local fallback).
	Decision Decision
}

// RunOptions configures Run. The zero value runs the step with the daemon's
// defaults, no correction hook and no OnError hook.
type RunOptions[P any] struct {
	// MaxAttempts is the attempt budget (initial call + retries); 0 = the
	// profile's (3 for "default", or the pod's SQUAWK_STEP_RETRY_MAX_ATTEMPTS).
	MaxAttempts int
	// MaxValidationRetries is the correction budget; 0 = the profile's (2).
	MaxValidationRetries int
	// Profile, Capability and Upstream are passed on to DecideRetry.
	Profile, Capability, Upstream string
	// HITLApproved marks the step's inputs as approved by a human: they
	// are never corrected.
	HITLApproved bool
	// DelegatedOrchestrator marks a capability that is dispatched once.
	DelegatedOrchestrator bool

	// Correct is called on CORRECT with the failed parameters and returns
	// corrected ones. A correction does not consume an attempt. When nil,
	// the policy is told no correction is available.
	Correct func(ctx context.Context, params P, d Decision) (P, error)
	// OnError, when set, has the final say after each decision.
	OnError func(info ErrorInfo) Tier
	// Sleep waits d or until ctx ends, returning ctx's error then. nil =
	// a timer. Tests swap it to assert delays without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// RunError is returned by Run when the step did not succeed.
type RunError struct {
	// Attempts is the number of times the step was called.
	Attempts int
	// Decision is the last decision taken (after the OnError hook); for a
	// run that stopped on cancellation it is a local REASON_CANCELLED FAIL,
	// and it is the zero Decision when DecideRetry itself failed.
	Decision Decision
	// Err is the last error the step returned.
	Err error
	// Cause, when not nil, is why the run stopped other than the policy:
	// ctx's error during a wait, the correction hook's error, or
	// DecideRetry's error.
	Cause error
}

func (e *RunError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "squawk: step failed after %d attempt(s)", e.Attempts)
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	} else if e.Decision.Action != squawkv1.Action_ACTION_UNSPECIFIED {
		fmt.Fprintf(&b, ": %s: %s", strings.TrimPrefix(e.Decision.Reason.String(), "REASON_"), e.Decision.Explanation)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": last error: %v", e.Err)
	}
	return b.String()
}

// Unwrap exposes both the step's last error and the cause to errors.Is and
// errors.As.
func (e *RunError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Run calls step with params until it succeeds or the policy ends it. After
// each failure it asks c.DecideRetry (the daemon or its local fallback):
// on RETRY it waits the delay (an ended ctx aborts the wait at once) and
// resends the same params; on CORRECT it calls opts.Correct and resends the
// corrected params without consuming an attempt; on FAIL it returns a
// *RunError carrying the decision. opts.OnError may override each decision.
// A step that fails after ctx ended is never retried.
func Run[P, R any](ctx context.Context, c *Client, params P, step func(context.Context, P) (R, error), opts RunOptions[P]) (R, error) {
	var zero R
	sleep := opts.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	budget := opts.MaxAttempts
	if budget <= 0 {
		budget = int(c.profile.maxAttempts)
	}
	attempt, corrections := 1, 0
	for calls := 1; ; calls++ {
		result, err := step(ctx, params)
		if err == nil {
			return result, nil
		}
		req := opts.request(ctx, err, attempt, corrections)
		if ctx.Err() != nil {
			// The daemon cannot be asked on an ended ctx, and the answer is
			// fixed: nothing is retried after cancellation.
			req.Cancelled = true
			d, lerr := c.decideLocally(req, ctx.Err())
			if lerr != nil {
				return zero, &RunError{Attempts: calls, Err: err, Cause: lerr}
			}
			return zero, &RunError{Attempts: calls, Decision: d, Err: err}
		}
		d, derr := c.DecideRetry(ctx, req)
		if derr != nil {
			return zero, &RunError{Attempts: calls, Err: err, Cause: derr}
		}
		if opts.OnError != nil {
			d = override(d, opts.OnError(ErrorInfo{
				Attempt:         attempt,
				CorrectionsUsed: corrections,
				Err:             err,
				Request:         req,
				Decision:        d,
			}), attempt, budget, c.profile.backoff)
		}
		switch d.Action {
		case squawkv1.Action_ACTION_RETRY:
			if werr := sleep(ctx, d.Delay); werr != nil {
				return zero, &RunError{Attempts: calls, Decision: cancelledDecision(d), Err: err, Cause: werr}
			}
			attempt++
		case squawkv1.Action_ACTION_CORRECT:
			if opts.Correct == nil {
				return zero, &RunError{Attempts: calls, Decision: d, Err: err,
					Cause: errors.New("squawk: the policy asked for a correction and RunOptions.Correct is nil")}
			}
			fixed, cerr := opts.Correct(ctx, params, d)
			if cerr != nil {
				return zero, &RunError{Attempts: calls, Decision: d, Err: err,
					Cause: fmt.Errorf("squawk: correction hook: %w", cerr)}
			}
			params = fixed
			corrections++
		default:
			return zero, &RunError{Attempts: calls, Decision: d, Err: err}
		}
	}
}

// override applies an OnError verdict to a decision.
func override(d Decision, tier Tier, attempt, budget int, backoff Backoff) Decision {
	switch tier {
	case TierFail:
		if d.Action != squawkv1.Action_ACTION_FAIL {
			d.Action = squawkv1.Action_ACTION_FAIL
			d.Delay = 0
			d.ConsumesAttempt = true
			d.Explanation = "The OnError hook ended the step (the policy said " + d.String() + ")."
		}
	case TierRetry:
		if d.Action == squawkv1.Action_ACTION_RETRY ||
			d.Reason == squawkv1.Reason_REASON_CANCELLED ||
			d.Reason == squawkv1.Reason_REASON_ATTEMPTS_EXHAUSTED ||
			attempt >= budget {
			return d
		}
		was := d.String()
		d.Action = squawkv1.Action_ACTION_RETRY
		d.Delay = backoff.Delay(attempt)
		if hint := d.Classification.GetRetryAfter(); hint != nil {
			d.Delay = hint.AsDuration()
		}
		d.ConsumesAttempt = true
		d.Explanation = fmt.Sprintf("The OnError hook asked for a resend (the policy said %s); "+
			"resend the same payload after %d ms, attempt %d of %d.", was, roundMS(d.Delay), attempt+1, budget)
	}
	return d
}

// cancelledDecision is what a RETRY becomes when ctx ends during its wait.
func cancelledDecision(d Decision) Decision {
	d.Action = squawkv1.Action_ACTION_FAIL
	d.Reason = squawkv1.Reason_REASON_CANCELLED
	d.Delay = 0
	d.Explanation = "The step was cancelled while waiting to resend; nothing is retried after cancellation."
	return d
}

// request builds the DecideRetry request for a failed attempt.
func (o *RunOptions[P]) request(ctx context.Context, err error, attempt, corrections int) *squawkv1.DecideRetryRequest {
	req := &squawkv1.DecideRetryRequest{
		Attempt:               int32(attempt),
		ValidationRetriesUsed: int32(corrections),
		CorrectionAvailable:   o.Correct != nil,
		HitlApproved:          o.HITLApproved,
		DelegatedOrchestrator: o.DelegatedOrchestrator,
		Capability:            o.Capability,
		Upstream:              o.Upstream,
		Profile:               o.Profile,
	}
	if o.MaxAttempts > 0 {
		n := int32(o.MaxAttempts)
		req.MaxAttempts = &n
	}
	if o.MaxValidationRetries > 0 {
		n := int32(o.MaxValidationRetries)
		req.MaxValidationRetries = &n
	}
	if deadline, ok := ctx.Deadline(); ok {
		req.Deadline = durationpb.New(max(0, time.Until(deadline)))
	}
	var se *StepError
	if errors.As(err, &se) {
		req.HttpStatus = int32(se.HTTPStatus)
		req.TransportFailure = se.TransportFailure
		req.ResponseBody = se.Body
		if len(req.ResponseBody) > maxBodyBytes {
			req.ResponseBody = req.ResponseBody[:maxBodyBytes]
		}
		req.Headers = se.Headers
	} else {
		req.TransportFailure = true
	}
	return req
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
