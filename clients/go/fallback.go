package squawk

import (
	"fmt"
	"math"
	"time"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The local fallback: what the client decides alone when the daemon did not
// answer, as docs/fallback.md specifies it. Its numbers and tables are
// generated into fallback_table.go from clients/fallback/contract.json; the
// cases in clients/fallback/cases.json check it, through one runner, against
// the same expectations as the other clients.

func validateRequest(req *squawkv1.DecideRetryRequest) error {
	if req.GetAttempt() < 1 {
		return &InputError{Field: "attempt", Message: fmt.Sprintf("must be >= 1 (1-based), got %d", req.GetAttempt())}
	}
	if req.MaxAttempts != nil && req.GetMaxAttempts() < 1 {
		return &InputError{Field: "max_attempts", Message: fmt.Sprintf("must be >= 1 when set, got %d", req.GetMaxAttempts())}
	}
	if err := checkStatus(req.GetHttpStatus()); err != nil {
		return err
	}
	if req.GetValidationRetriesUsed() < 0 {
		return &InputError{Field: "validation_retries_used", Message: fmt.Sprintf("must be >= 0, got %d", req.GetValidationRetriesUsed())}
	}
	if req.MaxValidationRetries != nil && req.GetMaxValidationRetries() < 0 {
		return &InputError{Field: "max_validation_retries", Message: fmt.Sprintf("must be >= 0 when set, got %d", req.GetMaxValidationRetries())}
	}
	if dl := req.GetDeadline(); dl != nil {
		if err := dl.CheckValid(); err != nil {
			return &InputError{Field: "deadline", Message: fmt.Sprintf("is not a valid duration: %v", err)}
		}
		if dl.AsDuration() < 0 {
			return &InputError{Field: "deadline", Message: "must not be negative"}
		}
	}
	if n := len(req.GetResponseBody()); n > maxBodyBytes {
		return &InputError{Field: "response_body", Message: fmt.Sprintf("%d bytes is over the limit of %d bytes", n, maxBodyBytes)}
	}
	return nil
}

// decideLocal routes one failed attempt by the "default" profile p, with
// corrections disabled. The rules run in the daemon's order and the first
// that applies decides.
func decideLocal(req *squawkv1.DecideRetryRequest, p localProfile, now time.Time) (Decision, error) {
	if err := validateRequest(req); err != nil {
		return Decision{}, err
	}
	seen := classifyLocal(req.GetHttpStatus(), req.GetTransportFailure(), req.GetHeaders(), now)
	status := req.GetHttpStatus()
	transport := req.GetTransportFailure() || status == 0

	fail := func(reason squawkv1.Reason, why string) Decision {
		return Decision{
			Action:          squawkv1.Action_ACTION_FAIL,
			Reason:          reason,
			Explanation:     why,
			ConsumesAttempt: true,
			Classification:  seen,
		}
	}

	switch {
	case req.GetCancelled():
		return fail(squawkv1.Reason_REASON_CANCELLED,
			"The step was cancelled; nothing is retried after cancellation."), nil
	case notRetryable(req.GetResponseBody()):
		return fail(squawkv1.Reason_REASON_EXPLICIT_NOT_RETRYABLE,
			"The component declared error.retryable=false, which stops every same-step retry."), nil
	case !transport && terminalStatus(status):
		return fail(squawkv1.Reason_REASON_TERMINAL_STATUS,
			fmt.Sprintf("HTTP %d is an authentication or method error; retrying cannot fix it.", status)), nil
	case req.GetDelegatedOrchestrator():
		return fail(squawkv1.Reason_REASON_SINGLE_DISPATCH,
			"A delegated orchestrator is dispatched exactly once; it is never retried here."), nil
	case transport || transientStatus(status):
		return resendLocal(req, p, seen, transport, false, now, fail), nil
	case serverMarksRetryable(req.GetHeaders()):
		return resendLocal(req, p, seen, transport, true, now, fail), nil
	case status >= 400 && status < 500:
		if req.GetHitlApproved() {
			return fail(squawkv1.Reason_REASON_HITL_PROTECTED,
				fmt.Sprintf("HTTP %d on human-approved inputs; they are never rewritten or resent.", status)), nil
		}
		// The daemon's sentence: without it no analyzer runs, and the
		// fallback answers as the daemon does when none is enabled.
		return fail(squawkv1.Reason_REASON_NO_CORRECTION_AVAILABLE,
			fmt.Sprintf("HTTP %d needs corrected parameters and no analyzer or correction hook "+
				"is enabled; a non-transient 4xx is never resent unchanged.", status)), nil
	default:
		return fail(squawkv1.Reason_REASON_NOT_RETRYABLE_STATUS,
			fmt.Sprintf("HTTP %d is not in profile '%s''s retryable set.", status, fallbackProfile)), nil
	}
}

func serverMarksRetryable(headers map[string]string) bool {
	retry, ok := shouldRetry(headers)
	return ok && retry
}

func resendLocal(req *squawkv1.DecideRetryRequest, p localProfile, seen *squawkv1.ClassifyResponse, transport,
	marked bool, now time.Time, fail func(squawkv1.Reason, string) Decision) Decision {
	reason := squawkv1.Reason_REASON_TRANSIENT_STATUS
	what := fmt.Sprintf("HTTP %d is transient", req.GetHttpStatus())
	switch {
	case transport:
		reason = squawkv1.Reason_REASON_TRANSPORT_FAILURE
		what = "The call failed in transport"
	case marked:
		what = fmt.Sprintf("HTTP %d is marked retryable by the server's x-should-retry", req.GetHttpStatus())
	}
	// Before the attempt count, as the daemon reads it (decide.py).
	if pushbackRefuses(req.GetHeaders()) {
		return fail(squawkv1.Reason_REASON_SERVER_PUSHBACK,
			what+", but the server's grpc-retry-pushback-ms asks not to retry (a negative or unparsable value).")
	}
	if retry, ok := shouldRetry(req.GetHeaders()); ok && !retry && !transport {
		return fail(squawkv1.Reason_REASON_SERVER_PUSHBACK,
			what+", but the server's x-should-retry: false asks not to retry.")
	}
	attempt := req.GetAttempt()
	maxAttempts := p.maxAttempts
	if req.MaxAttempts != nil {
		maxAttempts = req.GetMaxAttempts()
	}
	if attempt >= maxAttempts {
		return fail(squawkv1.Reason_REASON_ATTEMPTS_EXHAUSTED,
			fmt.Sprintf("%s, but attempt %d of %d was the last.", what, attempt, maxAttempts))
	}
	// asker names the server's header when the server asked for the wait;
	// empty for the backoff.
	wait, source, asker := p.backoff.Delay(int(attempt)), "backoff", ""
	if seen.GetRetryAfter() != nil {
		// The wait is the classification's; which header gave it is asked
		// of the parser that chose it.
		_, from, _ := waitHint(req.GetHeaders(), now)
		wait, source = seen.GetRetryAfter().AsDuration(), "the server's "+from
		asker = source
	} else if !transport && req.GetHttpStatus() == 429 {
		// A 429 without a wait hint waits for the last spent quota's reset.
		if spentWait, from, ok := spentQuotaWait(req.GetHeaders(), now); ok {
			wait, source = spentWait, "the server's "+from+", remaining 0"
			asker = "the server's " + from + " (remaining 0)"
		}
	}
	dl := req.GetDeadline()
	if dl != nil && wait > dl.AsDuration() {
		return fail(squawkv1.Reason_REASON_DEADLINE_EXCEEDED,
			fmt.Sprintf("%s, but the %d ms wait would outlast the %d ms left before the step's deadline.",
				what, roundMS(wait), roundMS(dl.AsDuration())))
	}
	// Without a deadline, a wait the server asks for is held to the
	// built-in profile's max_retry_wait; with one, the deadline judges it.
	if dl == nil && asker != "" && wait > maxRetryWait {
		return fail(squawkv1.Reason_REASON_WAIT_TOO_LONG,
			fmt.Sprintf("%s, but %s asks for %d ms, past the profile's max_retry_wait of %d ms "+
				"and there is no deadline to judge it by.", what, asker, roundMS(wait), roundMS(maxRetryWait)))
	}
	return Decision{
		Action: squawkv1.Action_ACTION_RETRY,
		Reason: reason,
		Delay:  wait,
		Explanation: fmt.Sprintf("%s; resend the same payload after %d ms (%s), attempt %d of %d.",
			what, roundMS(wait), source, attempt+1, maxAttempts),
		ConsumesAttempt: true,
		Classification:  seen,
	}
}

func roundMS(d time.Duration) int64 {
	return int64(math.RoundToEven(msFloat(d)))
}
