package squawk

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// maxOutcomes is the daemon's limit on outcomes in one ReportOutcome call.
const maxOutcomes = 1000

// Admission is the pod's answer to Admit: whether one call may be
// dispatched to an upstream now.
type Admission struct {
	// Allowed says whether to dispatch now.
	Allowed bool
	// Reason is REASON_ADMITTED when allowed, else REASON_CIRCUIT_OPEN,
	// REASON_UPSTREAM_COOLING_DOWN, REASON_UPSTREAM_SATURATED (the pace
	// cannot start the call in time, or its concurrency limit is full;
	// Explanation says which) or REASON_IN_FLIGHT_CAP (the declared cap on
	// calls in flight is full: ask again after RetryAfter).
	Reason squawkv1.Reason
	// Explanation is, when refused REASON_UPSTREAM_SATURATED, the daemon's
	// sentence naming the limit that refused the call and its number (the
	// queue's limit, the step's deadline, the concurrency limit); at most
	// 512 bytes of valid UTF-8. Empty otherwise, and from an older daemon.
	Explanation string
	// RetryAfter is, when refused, how long until a call could be admitted
	// (the breaker half-opens, the cool-down ends, or the pace has room);
	// zero when allowed.
	RetryAfter time.Duration
	// Wait is, when allowed, how long to wait before dispatching: the
	// pacer's start for the call (zero = now). Dispatch after it without
	// asking again.
	Wait time.Duration
	// Permits is, when allowed, how many dispatches the answer admits (1
	// unless more were asked with AdmitRequest.Permits and nothing limits
	// the upstream: breaker closed, no cool-down, no pace); 0 when refused.
	Permits int
	// Lease is, when Permits > 1, how long the permits after the first stay
	// valid from the answer; a permit not used by then lapses.
	Lease time.Duration
	// Spacing is, when Permits > 1 under a pace, the time between the
	// permits' starts: permit i (the first is 0) starts no earlier than
	// Wait + i x Spacing from the answer. Zero when nothing paces (every
	// permit may start at once), and when Permits is 1. At most a second
	// (the longest lease kept).
	Spacing time.Duration
	// BreakerState is the upstream's breaker after this call.
	BreakerState squawkv1.BreakerState
	// Probe is true for one of the half-open probes, whose outcome decides
	// whether the breaker closes again.
	Probe bool
	// Fallback is true when the daemon could not answer and the call was
	// admitted without it (fail open).
	Fallback bool
	// FallbackCause is the daemon error behind a Fallback admission.
	FallbackCause error
	// AdmissionID is, when allowed, the admission's id (16 lowercase hex
	// digits): send it as Outcome.AdmissionId (and DecideRetryRequest's)
	// with the call's outcome, so that it counts for the upstream's learned
	// concurrency limit. Every permit of a lease shares it. Empty from an
	// older daemon, for an empty upstream, and when falling back.
	AdmissionID string
	// HoldsSlot is, when allowed, whether the call holds a slot of the
	// upstream's declared cap on calls in flight until its outcome names
	// AdmissionID: report that outcome at once, since another caller may be
	// waiting for the slot (Run does). False when refused, from an older
	// daemon, and when falling back.
	HoldsSlot bool
	// DecisionID is the daemon's id for this refusal, for ExplainDecision /
	// `squawk explain ID`; empty when the daemon kept none (an allowed call,
	// the local fallback). An id read from the wire is kept only when it is
	// at most 64 characters of printable ASCII.
	DecisionID string
}

// String is a short log-friendly form, e.g. "ADMITTED (breaker CLOSED)" or
// "REFUSED for 1.5s (UPSTREAM_COOLING_DOWN, breaker CLOSED)".
func (a Admission) String() string {
	var b strings.Builder
	breaker := "breaker " + strings.TrimPrefix(a.BreakerState.String(), "BREAKER_STATE_")
	if a.Allowed {
		b.WriteString("ADMITTED")
		if a.Wait > 0 {
			fmt.Fprintf(&b, " after %v", a.Wait)
		}
		if a.Permits > 1 {
			fmt.Fprintf(&b, " x%d for %v", a.Permits, a.Lease)
			if a.Spacing > 0 {
				fmt.Fprintf(&b, " every %v", a.Spacing)
			}
		}
		fmt.Fprintf(&b, " (%s)", breaker)
	} else {
		fmt.Fprintf(&b, "REFUSED for %v (%s, %s)", a.RetryAfter, strings.TrimPrefix(a.Reason.String(), "REASON_"), breaker)
	}
	if a.Probe {
		b.WriteString(" probe")
	}
	if a.Fallback {
		b.WriteString(" [local fallback]")
	}
	return b.String()
}

// Admit asks the pod whether a call to req's upstream may be dispatched
// now; ask it before each dispatch. An allowed answer may carry a Wait (the
// pod's pace): start the call after it. It fails open: when the daemon does
// not decide (as for DecideRetry's fallback), the call is admitted at once
// (REASON_ADMITTED, one permit, breaker CLOSED) with Fallback set and
// counted in FallbackCount, since a missing sidecar must not stop every
// dispatch. WithFallbackDisabled returns the daemon's error instead. A
// request the daemon refuses is an *InputError. req.Criticality is how much
// the call matters (unset = CRITICAL); Admit does not read ctx's, so pass
// CriticalityFrom(ctx) to send the running step's.
//
// The daemon's answer is bounded before it is used, as any answer from the
// wire: a negative or unreadable duration is zero, a wait, retry-after or
// lease over a day is a day, a spacing over a second is a second, and
// permits are clamped to 0..100 (at least 1 when allowed).
func (c *Client) Admit(ctx context.Context, req *squawkv1.AdmitRequest) (Admission, error) {
	if req == nil {
		return Admission{}, nilRequest("Admit")
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	resp, err := c.rpc.Admit(callCtx, req)
	if err == nil {
		return admissionFromProto(resp), nil
	}
	if !c.fallsBack(ctx, err) {
		return Admission{}, wrapCallError(ctx, "Admit", err)
	}
	c.fallbacks.Add(1)
	return Admission{
		Allowed:       true,
		Reason:        squawkv1.Reason_REASON_ADMITTED,
		Permits:       1,
		BreakerState:  squawkv1.BreakerState_BREAKER_STATE_CLOSED,
		Fallback:      true,
		FallbackCause: err,
	}, nil
}

// maxAdmitWait bounds every duration of an Admit answer (as the request's
// deadline is bounded): a daemon or proxy answering a year must not park a
// step for a year.
const maxAdmitWait = 24 * time.Hour

// maxPermits is the most permits one Admit may ask for or grant.
const maxPermits = 100

func admissionFromProto(resp *squawkv1.AdmitResponse) Admission {
	a := Admission{
		Allowed:      resp.GetAllowed(),
		Reason:       resp.GetReason(),
		BreakerState: resp.GetBreakerState(),
		Probe:        resp.GetProbe(),
	}
	if !a.Allowed {
		a.RetryAfter = boundedWait(resp.GetRetryAfter())
		a.Explanation = boundedText(resp.GetExplanation(), maxExplanation)
		a.DecisionID = decisionID(resp.GetDecisionId())
		return a
	}
	a.Wait = boundedWait(resp.GetWait())
	a.AdmissionID = admissionID(resp.GetAdmissionId())
	a.HoldsSlot = resp.GetHoldsSlot()
	a.Permits = min(max(int(resp.GetPermits()), 1), maxPermits)
	if a.Permits > 1 {
		a.Lease = boundedWait(resp.GetLease())
		a.Spacing = min(boundedWait(resp.GetSpacing()), maxSpacing)
	}
	return a
}

// maxSpacing is the longest spacing read from an answer: a lease is kept a
// second at most (maxLease), so a longer one starts no spare permit within
// it.
const maxSpacing = maxLease

// admissionID keeps an answer's admission id only in the shape the daemon
// gives (16 lowercase hex digits): it is sent back, and anything else would
// have the report refused.
func admissionID(id string) string {
	if len(id) != 16 {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
	}
	return id
}

// maxExplanation bounds an Admit answer's explanation, in bytes.
const maxExplanation = 512

// boundedText reads text from the wire: valid UTF-8, cut to at most max
// bytes at a character boundary.
func boundedText(text string, max int) string {
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) <= max {
		return text
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}

// boundedWait reads a duration from the wire into 0..maxAdmitWait; an
// unset, negative or malformed one is zero.
func boundedWait(d *durationpb.Duration) time.Duration {
	if d == nil || d.CheckValid() != nil {
		return 0
	}
	return min(max(d.AsDuration(), 0), maxAdmitWait)
}

// ReportOutcome tells the pod how dispatches ended, so that its breakers
// and retry budgets learn from every executor, and returns how many
// outcomes were recorded (those with an upstream). A failure already sent
// to DecideRetry with its upstream is recorded there; report successes and
// failures no decision was asked for. It fails open like Admit: with the
// daemon unreachable or too slow it records nothing, returns 0 and counts
// one fallback. The request must hold 1 to 1,000 outcomes, none nil.
func (c *Client) ReportOutcome(ctx context.Context, req *squawkv1.ReportOutcomeRequest) (int, error) {
	if req == nil {
		return 0, nilRequest("ReportOutcome")
	}
	// Checked here too, so that a bad report is refused alike whether or
	// not the daemon answers, and a nil outcome never reaches the encoder.
	if n := len(req.GetOutcomes()); n < 1 || n > maxOutcomes {
		return 0, fmt.Errorf("squawk: ReportOutcome: %w", &InputError{Field: "outcomes",
			Message: fmt.Sprintf("%d outcomes is outside 1..%d", n, maxOutcomes)})
	}
	for i, o := range req.GetOutcomes() {
		if o == nil {
			return 0, fmt.Errorf("squawk: ReportOutcome: %w", &InputError{Field: fmt.Sprintf("outcomes[%d]", i),
				Message: "must not be nil"})
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	resp, err := c.rpc.ReportOutcome(callCtx, req)
	if err == nil {
		return int(resp.GetRecorded()), nil
	}
	if !c.fallsBack(ctx, err) {
		return 0, wrapCallError(ctx, "ReportOutcome", err)
	}
	c.fallbacks.Add(1)
	return 0, nil
}

// maxUpstreamPages is the most pages GetUpstreams reads, as `squawk
// upstreams` does: ten times a full registry (10,000 upstreams by default,
// 1,000 a page). Names tracked while it lists come on later pages, so a
// flood of new names, or a server that never stops answering a
// next_page_token, would otherwise keep it reading.
const maxUpstreamPages = 100

// GetUpstreams lists the pod's state of every tracked upstream (of
// req.Profile, and named exactly req.Upstream, when set), in the order the
// pod began tracking them; with req.IncludeFleet each state's Fleet also
// holds the fleet's view, where the pod has one (the Redis store). It reads page after page (each of at most
// req.PageSize, 1,000 when unset, starting after req.PageToken when set)
// until the daemon answers an empty next_page_token; req itself is not
// changed. After 100 pages it stops with an ABORTED error rather than read
// on (as botocore's paginator refuses a token that never ends); read pages
// yourself with GetUpstreamsPage to go further. It has no fallback: an
// unreachable daemon is an error. Like AnalyzeError it is bounded by ctx
// only, not the call timeout: it is not on a dispatch's path, and a pod
// tracking thousands of upstreams may take longer than a decision to list
// them.
func (c *Client) GetUpstreams(ctx context.Context, req *squawkv1.GetUpstreamsRequest) ([]*squawkv1.UpstreamState, error) {
	if req == nil {
		return nil, nilRequest("GetUpstreams")
	}
	page := proto.Clone(req).(*squawkv1.GetUpstreamsRequest)
	var states []*squawkv1.UpstreamState
	for range maxUpstreamPages {
		resp, err := c.GetUpstreamsPage(ctx, page)
		if err != nil {
			return nil, err
		}
		states = append(states, resp.GetUpstreams()...)
		if resp.GetNextPageToken() == "" {
			return states, nil
		}
		page.PageToken = resp.GetNextPageToken()
	}
	return nil, fmt.Errorf("squawk: GetUpstreams: %w", status.Errorf(codes.Aborted,
		"stopped after %d pages; more upstreams are being tracked than one listing can read", maxUpstreamPages))
}

// GetUpstreamsPage answers one page of GetUpstreams as the daemon sends
// it: pass its NextPageToken back as req.PageToken for the next page; it
// is empty on the last. Bounded by ctx only, with no fallback, like
// GetUpstreams.
func (c *Client) GetUpstreamsPage(ctx context.Context, req *squawkv1.GetUpstreamsRequest) (*squawkv1.GetUpstreamsResponse, error) {
	if req == nil {
		return nil, nilRequest("GetUpstreams")
	}
	resp, err := c.rpc.GetUpstreams(ctx, req)
	if err != nil {
		return nil, wrapCallError(ctx, "GetUpstreams", err)
	}
	return resp, nil
}
