package squawk

import (
	"context"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// GetEvents answers one page of the pod's event history as the daemon
// sends it: breaker transitions (the pod's and the fleet's), pace changes
// and cool-downs begun, each with its cause, oldest first. The page holds
// the events numbered past req.After (0 starts from the oldest the pod
// still holds), at most req.PageSize of them (100 when unset, 500 at
// most), of req.Profile and of the upstream named exactly req.Upstream
// when set. Keep the answer's NextAfter and pass it back as req.After to
// go on; its Lost counts the events past req.After the daemon no longer
// holds (it keeps the latest 4,096). A nil req is an empty request.
// Bounded by ctx only, with no fallback, like
// GetUpstreamsPage: a negative req.After, or one past the latest event
// this daemon process numbered, is an *InputError for "after".
func (c *Client) GetEvents(ctx context.Context, req *squawkv1.GetEventsRequest) (*squawkv1.GetEventsResponse, error) {
	if req == nil {
		req = &squawkv1.GetEventsRequest{}
	}
	resp, err := c.rpc.GetEvents(ctx, req)
	if err != nil {
		return nil, wrapCallError(ctx, "GetEvents", err)
	}
	return resp, nil
}

// ExplainDecision answers why the pod refused a step: the decision that
// decisionID names (an Admission's or a Decision's DecisionID: an Admit
// refused, a DecideRetry that answered FAIL on a named upstream), the
// upstream's state when it was made (breaker, pace) and the upstream's
// latest events up to it (at most 10, oldest first), as
// `squawk explain ID` shows them. An id is valid with the daemon process
// that gave it while it keeps the decision (the latest 4,096 refusals): an
// unknown one, or one from a restarted daemon, is codes.NotFound, and an
// empty one or one over 64 characters an *InputError for "decision_id".
// Bounded by ctx only, with no fallback, like GetEvents.
func (c *Client) ExplainDecision(ctx context.Context, decisionID string) (*squawkv1.ExplainDecisionResponse, error) {
	resp, err := c.rpc.ExplainDecision(ctx, &squawkv1.ExplainDecisionRequest{DecisionId: decisionID})
	if err != nil {
		return nil, wrapCallError(ctx, "ExplainDecision", err)
	}
	return resp, nil
}
