package squawk

import (
	"fmt"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// Tier is an OnError hook's verdict.
type Tier int

const (
	// TierDefault follows the decision. Values other than the three
	// constants count as TierDefault.
	TierDefault Tier = iota
	// TierRetry resends the same parameters when the decision said CORRECT
	// or FAIL, after the Retry-After of the failure or else the default
	// profile's backoff. It never overrides a CANCELLED, ATTEMPTS_EXHAUSTED
	// or DEADLINE_EXCEEDED decision, nor resends past the attempt budget.
	TierRetry
	// TierFail ends the step whatever the decision said.
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

// override applies an OnError verdict to a decision for the failed attempt
// under an attempt budget; backoff is the default profile's, for a forced
// resend without a Retry-After. The rule and its sentences are the same in
// every Squawk client.
func override(d Decision, tier Tier, attempt, budget int, backoff Backoff) Decision {
	had := d.Action.String() + ", " + d.Reason.String()
	switch tier {
	case TierFail:
		if d.Action == squawkv1.Action_ACTION_FAIL {
			return d
		}
		d.Action = squawkv1.Action_ACTION_FAIL
		d.Delay = 0
		d.ConsumesAttempt = true
		d.Explanation = "The error hook ended the step; the policy had answered " + had + "."
	case TierRetry:
		if d.Action == squawkv1.Action_ACTION_RETRY || final(d.Reason) || attempt >= budget {
			return d
		}
		d.Action = squawkv1.Action_ACTION_RETRY
		d.Delay = backoff.Delay(attempt)
		if hint := d.Classification.GetRetryAfter(); hint != nil {
			d.Delay = hint.AsDuration()
		}
		d.ConsumesAttempt = true
		// The resend is the hook's, not the refusal the daemon kept.
		d.DecisionID = ""
		d.Explanation = fmt.Sprintf("The error hook asked for a resend; the policy had answered %s. "+
			"Resend the same payload after %d ms, attempt %d of %d.", had, roundMS(d.Delay), attempt+1, budget)
	}
	return d
}

// final reports the reasons no error hook may turn into a resend: the step
// was cancelled, its attempts are spent, or the wait would outlast its
// deadline.
func final(r squawkv1.Reason) bool {
	switch r {
	case squawkv1.Reason_REASON_CANCELLED, squawkv1.Reason_REASON_ATTEMPTS_EXHAUSTED, squawkv1.Reason_REASON_DEADLINE_EXCEEDED:
		return true
	}
	return false
}

// cancelledDecision is what a RETRY becomes when ctx ends during its wait:
// a local FAIL, which the daemon kept no decision id for.
func cancelledDecision(d Decision) Decision {
	d.Action = squawkv1.Action_ACTION_FAIL
	d.Reason = squawkv1.Reason_REASON_CANCELLED
	d.Delay = 0
	d.DecisionID = ""
	d.Explanation = "The step was cancelled while waiting to resend; nothing is retried after cancellation."
	return d
}
