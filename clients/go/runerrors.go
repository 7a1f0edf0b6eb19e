package squawk

import (
	"fmt"
	"strings"

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

// RunError is returned by Run when the step did not succeed.
type RunError struct {
	// Calls is the number of times the step was called, corrections
	// included (a correction consumes no attempt but is a call); 0 when
	// the pod refused the first dispatch.
	Calls int
	// Decision is the last decision taken (after the OnError hook); for a
	// run that stopped on cancellation it is a local REASON_CANCELLED FAIL,
	// for one the pod would not admit a FAIL with the refusal's reason
	// (REASON_CIRCUIT_OPEN or REASON_UPSTREAM_COOLING_DOWN), and it is the
	// zero Decision when DecideRetry or Admit itself failed. Its DecisionID
	// names the daemon's refusal (for ExplainDecision) when the pod refused
	// the dispatch or the daemon answered FAIL on the step's upstream, and
	// is empty for a local decision.
	Decision Decision
	// Err is the last error the step returned; nil when it never ran.
	Err error
	// Cause, when not nil, is why the run stopped other than the policy:
	// ctx's error during a wait, the correction hook's error, or the error
	// of DecideRetry or Admit.
	Cause error
}

func (e *RunError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "squawk: step failed after %d call(s)", e.Calls)
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
