package squawk

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// Decision is the answer to one DecideRetry call.
type Decision struct {
	// Action is what to do next: ACTION_RETRY, ACTION_CORRECT or ACTION_FAIL.
	Action squawkv1.Action
	// Reason names the rule that decided.
	Reason squawkv1.Reason
	// Delay is how long to wait before resending; zero unless Action is RETRY.
	Delay time.Duration
	// Explanation is one human sentence saying why.
	Explanation string
	// ConsumesAttempt is false for corrections, which do not count against
	// max_attempts.
	ConsumesAttempt bool
	// Classification is the failure's classification under the same profile.
	Classification *squawkv1.ClassifyResponse
	// RetryAfter is how long until the upstream admits calls again, set
	// only when the pod's state of the upstream ended the step: a FAIL with
	// REASON_CIRCUIT_OPEN, REASON_RETRY_BUDGET_EXHAUSTED or (a cool-down
	// outlasting the deadline) REASON_DEADLINE_EXCEEDED, or Run's FAIL on an
	// Admit refusal. Zero otherwise.
	RetryAfter time.Duration
	// Fallback is true when the local fallback answered instead of the daemon.
	Fallback bool
	// FallbackCause is the daemon error that sent the call to the fallback
	// (nil when Fallback is false).
	FallbackCause error
	// DecisionID is the daemon's id for this refusal, for ExplainDecision /
	// `squawk explain ID`; empty when the daemon kept none (an allowed call,
	// the local fallback). The daemon keeps one for a FAIL on a named
	// upstream, and Run's FAIL on an Admit refusal carries the refusal's.
	// An id read from the wire is kept only when it is at most 64
	// characters of printable ASCII.
	DecisionID string
}

// Proto returns the decision as the wire message.
func (d Decision) Proto() *squawkv1.DecideRetryResponse {
	r := &squawkv1.DecideRetryResponse{
		Action:          d.Action,
		Delay:           durationpb.New(d.Delay),
		Reason:          d.Reason,
		Explanation:     d.Explanation,
		ConsumesAttempt: d.ConsumesAttempt,
		Classification:  d.Classification,
	}
	if d.DecisionID != "" {
		r.DecisionId = proto.String(d.DecisionID)
	}
	if d.RetryAfter > 0 {
		r.RetryAfter = durationpb.New(d.RetryAfter)
	}
	return r
}

// String is a short log-friendly form, e.g. "RETRY after 542ms (TRANSIENT_STATUS)".
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(d.Action.String(), "ACTION_"))
	if d.Action == squawkv1.Action_ACTION_RETRY {
		fmt.Fprintf(&b, " after %v", d.Delay)
	}
	fmt.Fprintf(&b, " (%s)", strings.TrimPrefix(d.Reason.String(), "REASON_"))
	if d.Fallback {
		b.WriteString(" [local fallback]")
	}
	return b.String()
}

func decisionFromProto(r *squawkv1.DecideRetryResponse) Decision {
	return Decision{
		Action:          r.GetAction(),
		Reason:          r.GetReason(),
		Delay:           r.GetDelay().AsDuration(),
		Explanation:     r.GetExplanation(),
		ConsumesAttempt: r.GetConsumesAttempt(),
		Classification:  r.GetClassification(),
		RetryAfter:      r.GetRetryAfter().AsDuration(),
		DecisionID:      decisionID(r.GetDecisionId()),
	}
}

// maxDecisionID is the longest decision id the daemon gives (and takes back
// in ExplainDecisionRequest).
const maxDecisionID = 64

// decisionID keeps an answer's decision id only when it is at most 64
// characters of printable ASCII (space to tilde): it is shown in logs and
// errors and sent back to ExplainDecision, so anything else from the wire
// is dropped rather than passed on.
func decisionID(id string) string {
	if len(id) > maxDecisionID {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < ' ' || c > '~' {
			return ""
		}
	}
	return id
}
