package squawk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// RunOptions configures Run. The zero value runs the step with the profile's
// budgets, no correction hook and no OnError hook. The step's deadline is
// ctx's: Run sends the time left to DecideRetry, which fails a resend whose
// wait would outlast it.
type RunOptions[P any] struct {
	// MaxAttempts is the attempt budget (initial call + retries); nil = the
	// profile's (3 for "default", or the pod's SQUAWK_STEP_RETRY_MAX_ATTEMPTS).
	// A pointer, because unset and a number are different requests: set it
	// with new(n), e.g. MaxAttempts: new(5). Must be >= 1 when set.
	MaxAttempts *int
	// MaxValidationRetries is the correction budget; nil = the profile's (2).
	// new(0) is a real budget of no corrections, sent as
	// max_validation_retries=0, not the profile's default. Must be >= 0.
	MaxValidationRetries *int
	// Profile and Capability are passed on to DecideRetry (and, with an
	// Upstream, to Admit and ReportOutcome).
	Profile, Capability string
	// Upstream names what the step calls. When set, Run asks Admit before
	// each dispatch and reports each success with ReportOutcome, so the
	// pod's breaker, retry budget and shared cool-down for it apply; when
	// empty, neither is called.
	Upstream string
	// Cost is the step's estimated cost in the upstream's token units (an
	// LLM request's prompt plus expected completion tokens), for a pod that
	// paces a token rate: sent with each Admit and reported with the
	// success, unless the result is a Coster. 0 = unknown. Finite, 0 to
	// 1e9. Used only with Upstream.
	Cost float64
	// Criticality is how much the step matters when the upstream's pace
	// cannot serve every call: sent with each Admit, where the lower levels
	// are given shorter waits, so shed first. Unset (CRITICALITY_UNSPECIFIED):
	// ctx's (see CriticalityFrom), else CRITICAL. Either way it is put in the
	// ctx step is called with, so the steps it runs inherit it.
	Criticality squawkv1.Criticality
	// FairnessKey is whose step this is (a tenant, an executor, a
	// workflow), sent with each Admit: while the upstream's pace cannot
	// serve every call, a key asking less than its share keeps all it asks
	// and the others share the rest by FairnessWeight. "" = none. At most
	// 256 characters, printable. Used only with Upstream; the steps it runs
	// do not inherit it.
	FairnessKey string
	// FairnessWeight is the key's weight in that share, sent with each
	// Admit. 0 = 1. Finite, 0 to 100. Used only with Upstream; the steps it
	// runs do not inherit it.
	FairnessWeight float64
	// HITLApproved marks the step's inputs as approved by a human: they
	// are never corrected.
	HITLApproved bool
	// DelegatedOrchestrator marks a capability that is dispatched once.
	DelegatedOrchestrator bool

	// Correct is called on CORRECT with the failed parameters, the step's
	// error and the decision, and returns corrected parameters, which are
	// sent next. A correction consumes no attempt; it counts against the
	// correction budget. Setting it tells the policy a correction is
	// available; when nil, a non-transient 4xx fails.
	Correct func(ctx context.Context, params P, err error, d Decision) (P, error)
	// OnError, when set, has the final say after each decision: TierFail
	// ends the step, TierRetry forces a resend of the same parameters (see
	// Tier for the limits), TierDefault follows the decision.
	OnError func(info ErrorInfo) Tier
	// Sleep waits d or until ctx ends, returning ctx's error then. nil =
	// a timer. It waits both the decided delays and the Admit refusals.
	// Tests swap it to assert delays without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Run calls step with params until it succeeds or the policy ends it. After
// each failure it asks c.DecideRetry (the daemon or its local fallback):
// on RETRY it waits the delay (an ended ctx aborts the wait at once) and
// resends the same params; on CORRECT it calls opts.Correct and sends the
// corrected params without consuming an attempt; on FAIL it returns a
// *RunError carrying the decision. opts.OnError may override each decision.
// A step that fails after ctx ended is never retried. Options out of range
// are an *InputError before step is called.
//
// With opts.Upstream set, each dispatch (the first and every resend) waits
// for c.Admit, which is sent the time left before ctx's deadline,
// opts.Cost, the step's criticality (opts.Criticality, else ctx's), and
// opts.FairnessKey and FairnessWeight. An admission with a Wait (the pod's
// pace) is slept with opts.Sleep, then the step is dispatched without
// asking again; a Wait longer than the time left ends the step at once,
// without sleeping, with a FAIL whose reason is REASON_UPSTREAM_SATURATED.
// A refusal with that reason ends the step the same way at once (no
// sleep, no DecideRetry).
// Any other refusal consumes no attempt and does not call step: Run waits
// its RetryAfter with opts.Sleep and asks again, but ends the step with a
// FAIL carrying the refusal's reason when the wait would outlast ctx's
// deadline, or on the refusal after as many in a row as the attempt budget.
// A busy key asks Admit for several permits: the spare permits of a grant
// start its next dispatches without Admit, each after its start (the
// lease's spacing under a pace) slept with opts.Sleep like a paced Wait; a
// spare permit that would start past ctx's deadline is left, and Admit
// asked. After a success it reports the outcome (with the step's latency, the
// result's Cost when it is a Coster, else opts.Cost, and the rate-limit
// headers of a RateLimitHeaderer result) through c.ReportOutcome, batched with the client's other
// reports (see WithOutcomeDelay); their errors are ignored. Admit and
// ReportOutcome fail open, so an absent daemon never stops a dispatch.
func Run[P, R any](ctx context.Context, c *Client, params P, step func(context.Context, P) (R, error), opts RunOptions[P]) (R, error) {
	var zero R
	if err := opts.validate(); err != nil {
		return zero, fmt.Errorf("squawk: Run: %w", err)
	}
	sleep := opts.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	budget := int(c.profile.maxAttempts)
	if opts.MaxAttempts != nil {
		budget = *opts.MaxAttempts
	}
	level, stepCtx := stepCriticality(ctx, opts.Criticality)
	var admit *squawkv1.AdmitRequest
	if opts.Upstream != "" {
		admit = &squawkv1.AdmitRequest{Upstream: opts.Upstream, Capability: opts.Capability, Profile: opts.Profile,
			Cost: opts.Cost, Criticality: level, FairnessKey: opts.FairnessKey, FairnessWeight: opts.FairnessWeight}
	}
	attempt, corrections := 1, 0
	var lastErr error
	for calls := 1; ; calls++ {
		// The dispatch's admission, which its outcome names (see
		// Admission.AdmissionID), and whether its permit is a paced lease's.
		var admission admitted
		if admit != nil {
			var stop *RunError
			if admission, stop = c.awaitAdmission(ctx, admit, budget, sleep); stop != nil {
				stop.Calls, stop.Err = calls-1, lastErr
				return zero, stop
			}
		}
		started := time.Now()
		result, err := step(stepCtx, params)
		if err == nil {
			if admit != nil {
				c.reportSuccess(admit, admission, time.Since(started), result)
			}
			return result, nil
		}
		lastErr = err
		if admit != nil {
			c.leases.drop(leaseKey{admit.GetProfile(), admit.GetUpstream(), admit.GetCapability()})
		}
		req := opts.request(ctx, err, attempt, corrections)
		req.AdmissionId = admission.id
		if ctx.Err() != nil {
			// The daemon cannot be asked on an ended ctx, and the answer is
			// fixed: nothing is retried after cancellation.
			req.Cancelled = true
			d, lerr := c.decideLocally(req, ctx.Err())
			if lerr != nil {
				return zero, &RunError{Calls: calls, Err: err, Cause: lerr}
			}
			return zero, &RunError{Calls: calls, Decision: d, Err: err}
		}
		d, derr := c.DecideRetry(ctx, req)
		if derr != nil {
			return zero, &RunError{Calls: calls, Err: err, Cause: derr}
		}
		if opts.OnError != nil {
			tier := opts.OnError(ErrorInfo{
				Attempt:         attempt,
				CorrectionsUsed: corrections,
				Err:             err,
				Request:         req,
				Decision:        d,
			})
			d = override(d, tier, attempt, budget, c.profile.backoff)
		}
		switch d.Action {
		case squawkv1.Action_ACTION_RETRY:
			if werr := sleep(ctx, d.Delay); werr != nil {
				return zero, &RunError{Calls: calls, Decision: cancelledDecision(d), Err: err, Cause: werr}
			}
			attempt++
		case squawkv1.Action_ACTION_CORRECT:
			if opts.Correct == nil {
				return zero, &RunError{Calls: calls, Decision: d, Err: err,
					Cause: errors.New("squawk: the policy asked for a correction and RunOptions.Correct is nil")}
			}
			fixed, cerr := opts.Correct(ctx, params, err, d)
			if cerr != nil {
				return zero, &RunError{Calls: calls, Decision: d, Err: err,
					Cause: fmt.Errorf("squawk: correction hook: %w", cerr)}
			}
			params = fixed
			corrections++
		default:
			return zero, &RunError{Calls: calls, Decision: d, Err: err}
		}
	}
}

// validate refuses budgets the wire cannot carry or the policy would refuse
// after the first call anyway; the fields are named as on the wire.
func (o *RunOptions[P]) validate() error {
	if n := o.MaxAttempts; n != nil && (*n < 1 || *n > math.MaxInt32) {
		return &InputError{Field: "max_attempts",
			Message: fmt.Sprintf("RunOptions.MaxAttempts must be >= 1 and fit in an int32 when set, got %d", *n)}
	}
	if n := o.MaxValidationRetries; n != nil && (*n < 0 || *n > math.MaxInt32) {
		return &InputError{Field: "max_validation_retries",
			Message: fmt.Sprintf("RunOptions.MaxValidationRetries must be >= 0 and fit in an int32 when set, got %d", *n)}
	}
	if x := o.Cost; math.IsNaN(x) || x < 0 || x > maxCost {
		return &InputError{Field: "cost",
			Message: fmt.Sprintf("RunOptions.Cost must be a finite number from 0 to 1e9, got %v", x)}
	}
	// The daemon refuses an unknown level; caught here, before the step runs.
	if _, known := squawkv1.Criticality_name[int32(o.Criticality)]; !known {
		return &InputError{Field: "criticality",
			Message: fmt.Sprintf("RunOptions.Criticality must be one of squawkv1.Criticality's values, got %d", o.Criticality)}
	}
	if n := utf8.RuneCountInString(o.FairnessKey); n > maxFairnessKeyChars {
		return &InputError{Field: "fairness_key",
			Message: fmt.Sprintf("RunOptions.FairnessKey must be at most 256 characters, got %d", n)}
	}
	if !printable(o.FairnessKey) {
		return &InputError{Field: "fairness_key",
			Message: "RunOptions.FairnessKey must hold printable characters only"}
	}
	if w := o.FairnessWeight; math.IsNaN(w) || w < 0 || w > maxFairnessWeight {
		return &InputError{Field: "fairness_weight",
			Message: fmt.Sprintf("RunOptions.FairnessWeight must be a finite number from 0 to 100, got %v", w)}
	}
	return nil
}

// maxFairnessKeyChars and maxFairnessWeight bound AdmitRequest's
// fairness_key and fairness_weight, as the daemon does.
const (
	maxFairnessKeyChars = 256
	maxFairnessWeight   = 100
)

// printable reports whether s is valid UTF-8 of printable characters only
// (letters, marks, numbers, punctuation, symbols and the ASCII space), the
// daemon's rule for a fairness key.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// maxCost bounds a step's estimated cost, as the daemon bounds
// AdmitRequest.cost and Outcome.cost.
const maxCost = 1e9

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
	if o.MaxAttempts != nil {
		req.MaxAttempts = new(int32(*o.MaxAttempts))
	}
	if o.MaxValidationRetries != nil {
		req.MaxValidationRetries = new(int32(*o.MaxValidationRetries))
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
