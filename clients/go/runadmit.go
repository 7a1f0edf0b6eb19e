package squawk

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The runner's side of the pod's upstream state: Admit before each
// dispatch, ReportOutcome after each success. The rule and its sentences
// are the same in every Squawk client. A failed dispatch is not reported
// here: the DecideRetry the runner sends carries the upstream, and the
// daemon records the failure there.

// admitted is what a dispatch starts on: the admission id its outcome
// names (empty when the pod gave none), and whether its permit is one of a
// lease of paced starts (a Spacing above zero), whose success may wait a
// lease to be reported (see patientOutcomeDelay), or holds a slot of the
// upstream's declared cap on calls in flight (Admission.HoldsSlot), whose
// success is reported at once. A spare permit of a lease holds no slot: the
// pod grants no lease under a cap.
type admitted struct {
	id      string
	patient bool
	urgent  bool
}

// awaitAdmission asks the pod to admit the next dispatch, waiting out its
// refusals and its paced start with sleep. It returns a nil *RunError once
// the dispatch may start, with what it starts on, else a *RunError without
// Calls and Err (Run fills them in) whose Decision or Cause says why the
// step ends: a saturated upstream (refused, or a paced start past ctx's
// deadline), another refusal past ctx's deadline, more than budget
// refusals in a row, Admit's own error, or ctx ending. Each Admit carries
// the time left before ctx's deadline, so the pod can refuse at once what
// its pace cannot start in time (shed at the source) instead of queueing
// it. A spare permit of the key's lease starts the dispatch without Admit,
// after sleeping until its start, which is before ctx's deadline (one that
// is not is left for the next dispatch, and this one asks).
func (c *Client) awaitAdmission(ctx context.Context, req *squawkv1.AdmitRequest, budget int,
	sleep func(context.Context, time.Duration) error) (admitted, *RunError) {
	key := leaseKey{req.GetProfile(), req.GetUpstream(), req.GetCapability()}
	left := noDeadline
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	p, spare, ask := c.leases.start(key, c.cfg.now(), left)
	if spare {
		// Slept as a paced Admit's wait is: the permit's start is
		// reserved in the pod's pace.
		if p.wait > 0 {
			if err := sleep(ctx, p.wait); err != nil {
				return admitted{}, &RunError{Decision: cancelledAdmission(), Cause: err}
			}
		}
		return admitted{p.admission, p.spacing > 0, false}, nil
	}
	req.Permits = int32(ask)
	for refusals := 1; ; refusals++ {
		deadline, hasDeadline := ctx.Deadline()
		if hasDeadline {
			// The wire takes at most a day; a longer deadline is no limit
			// on a pace that never waits longer than that.
			req.Deadline = durationpb.New(min(max(0, time.Until(deadline)), maxAdmitWait))
		}
		// A lease runs from the pod's answer; timed from the ask, a spare
		// is never used after it ends (and its starts, timed from the
		// answer, never before they come).
		asked := c.cfg.now()
		a, err := c.Admit(ctx, req)
		if err != nil {
			stop := &RunError{Cause: err}
			if ctx.Err() != nil {
				stop.Decision = cancelledAdmission()
			}
			return admitted{}, stop
		}
		if a.Allowed {
			c.leases.keep(key, asked, c.cfg.now(), a)
			if a.Wait <= 0 {
				return admitted{a.AdmissionID, a.Spacing > 0, a.HoldsSlot}, nil
			}
			// The pod grants waits shorter than the deadline it was sent;
			// one that is not (time passed on the way, or an older or
			// confused daemon) is not slept, since its call would start
			// too late.
			if hasDeadline && a.Wait > time.Until(deadline) {
				return admitted{}, &RunError{Decision: saturated(a.Wait, "", fmt.Sprintf(
					"The pod paces the dispatches to %s: this one could start in %d ms, past the step's deadline.",
					req.GetUpstream(), roundMS(a.Wait)))}
			}
			if err := sleep(ctx, a.Wait); err != nil {
				return admitted{}, &RunError{Decision: cancelledAdmission(), Cause: err}
			}
			return admitted{a.AdmissionID, a.Spacing > 0, a.HoldsSlot}, nil
		}
		// Saturation is the pod shedding at the source a call its pace
		// cannot serve in time: waiting its retry_after and asking again
		// would only queue the step behind the overload.
		if a.Reason == squawkv1.Reason_REASON_UPSTREAM_SATURATED {
			// The daemon names the limit (the queue's, the deadline, the
			// concurrency limit); an older one does not, and the deadline
			// is not always it.
			why := a.Explanation
			if why == "" {
				why = "The upstream's pace cannot start it within the step's deadline or the queue's limit."
			}
			return admitted{}, &RunError{Decision: saturated(a.RetryAfter, a.DecisionID, fmt.Sprintf(
				"The pod refused the dispatch to %s: %s. %s", req.GetUpstream(), a.Reason, why))}
		}
		if hasDeadline && a.RetryAfter > time.Until(deadline) {
			return admitted{}, &RunError{Decision: refused(a, fmt.Sprintf(
				"The pod refused the dispatch to %s: %s; it admits again in %d ms, past the step's deadline.",
				req.GetUpstream(), a.Reason, roundMS(a.RetryAfter)))}
		}
		// A refusal consumes no attempt, but the attempt budget also bounds
		// the refusals in a row, so that a breaker that never recovers ends
		// the step instead of holding it forever. A full in-flight cap is
		// waited out for as long as the deadline allows: its refusals are a
		// semaphore's queue, not an upstream that failed.
		if refusals > budget && a.Reason != squawkv1.Reason_REASON_IN_FLIGHT_CAP {
			return admitted{}, &RunError{Decision: refused(a, fmt.Sprintf(
				"The pod refused the dispatch to %s %d times in a row: %s.", req.GetUpstream(), refusals, a.Reason))}
		}
		if err := sleep(ctx, a.RetryAfter); err != nil {
			return admitted{}, &RunError{Decision: cancelledAdmission(), Cause: err}
		}
	}
}

// saturated is the FAIL that ends a step the pod's pace cannot start
// before its deadline; retryAfter is when the pace has room again, and id
// the refusal's Admission.DecisionID (empty for a paced start the runner
// itself found too late).
func saturated(retryAfter time.Duration, id, why string) Decision {
	return Decision{
		Action:          squawkv1.Action_ACTION_FAIL,
		Reason:          squawkv1.Reason_REASON_UPSTREAM_SATURATED,
		Explanation:     why,
		ConsumesAttempt: true,
		RetryAfter:      retryAfter,
		DecisionID:      id,
	}
}

// refused is the FAIL that ends a step on an Admit refusal, carrying the
// refusal's decision id.
func refused(a Admission, why string) Decision {
	return Decision{
		Action:          squawkv1.Action_ACTION_FAIL,
		Reason:          a.Reason,
		Explanation:     why,
		ConsumesAttempt: true,
		RetryAfter:      a.RetryAfter,
		DecisionID:      a.DecisionID,
	}
}

// cancelledAdmission is the FAIL of a step whose ctx ended while the pod
// was asked for, or refused, a dispatch.
func cancelledAdmission() Decision {
	return Decision{
		Action:          squawkv1.Action_ACTION_FAIL,
		Reason:          squawkv1.Reason_REASON_CANCELLED,
		Explanation:     "The step was cancelled while waiting to be admitted; nothing is retried after cancellation.",
		ConsumesAttempt: true,
	}
}

// reportSuccess tells the pod a dispatch succeeded, with its latency, its
// cost (result's Cost, else the step's estimated cost, req's) and result's
// rate-limit headers (see Coster and RateLimitHeaderer), which feed the
// pod's pace, and the admission id that admitted it (its slot of the
// learned concurrency limit is freed only so). The report
// goes with the client's next batch (see WithOutcomeDelay), so that a
// success that lands as ctx ends is still counted; its error is ignored:
// the step has its result, and a report lost to a slow or absent daemon
// costs the breaker one sample. The success of a dispatch started on a
// lease of paced starts (admission.patient) may wait longer in its batch;
// that of one holding a slot of a declared cap (admission.urgent) sends its
// batch at once.
func (c *Client) reportSuccess(req *squawkv1.AdmitRequest, admission admitted, latency time.Duration, result any) {
	c.queueOutcome(&squawkv1.Outcome{
		AdmissionId: admission.id,
		Upstream:    req.GetUpstream(),
		Capability:  req.GetCapability(),
		Profile:     req.GetProfile(),
		Success:     true,
		Latency:     durationpb.New(latency),
		Cost:        realCost(result, req.GetCost()),
		// The estimate Admit was charged, so that the pace charges the difference.
		EstimatedCost: req.GetCost(),
		Headers:       paceHeaders(result),
	}, admission.patient, admission.urgent)
}
