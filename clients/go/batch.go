package squawk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// MaxBatch is the most requests one DecideRetryBatch call may carry; the
// daemon refuses a longer batch, and so does the local fallback.
const MaxBatch = 10_000

// batchPerTimeout is how many batch items share one call timeout: a batch
// of hundreds of items takes the daemon longer than one decision, and a
// fixed 50 ms bound would send every large batch to the fallback.
const batchPerTimeout = 100

// BatchResult is the answer to one item of a DecideRetryBatch call: a
// Decision, or Err when the policy refused that item.
type BatchResult struct {
	Decision Decision
	// Err is an *InputError whose Field is the item's path, e.g.
	// "requests[3].attempt"; nil when Decision holds the answer.
	Err error
}

// DecideRetryBatch asks the daemon to decide many failed attempts in one
// call; results come in request order. A bad item gets its own Err and the
// others still get decisions. When the daemon does not decide (as for
// DecideRetry), the local fallback decides each item as DecideRetry would
// (unless disabled). The call is bounded by the call timeout once per
// started 100 items. A batch over MaxBatch items or with a nil item is
// refused as a whole with an *InputError.
func (c *Client) DecideRetryBatch(ctx context.Context, req *squawkv1.DecideRetryBatchRequest) ([]BatchResult, error) {
	if req == nil {
		return nil, nilRequest("DecideRetryBatch")
	}
	for i, item := range req.GetRequests() {
		if item == nil {
			return nil, fmt.Errorf("squawk: DecideRetryBatch: %w",
				&InputError{Field: fmt.Sprintf("requests[%d]", i), Message: "must not be nil"})
		}
	}
	n := len(req.GetRequests())
	chunks := max(1, (n+batchPerTimeout-1)/batchPerTimeout)
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout*time.Duration(chunks))
	defer cancel()
	resp, err := c.rpc.DecideRetryBatch(callCtx, req)
	if err == nil {
		return batchFromProto(resp, n)
	}
	if !c.fallsBack(ctx, err) {
		return nil, wrapCallError(ctx, "DecideRetryBatch", err)
	}
	if n > MaxBatch {
		return nil, fmt.Errorf("squawk: DecideRetryBatch (local fallback, daemon: %v): %w", err, &InputError{
			Field: "requests", Message: fmt.Sprintf("%d requests is over the limit of %d", n, MaxBatch)})
	}
	results := make([]BatchResult, n)
	for i, item := range req.GetRequests() {
		d, ferr := c.decideLocally(item, err)
		if ferr == nil {
			results[i].Decision = d
			continue
		}
		// Named by the item's path, as the daemon names it.
		var ie *InputError
		if errors.As(ferr, &ie) {
			ferr = &InputError{Field: fmt.Sprintf("requests[%d].%s", i, ie.Field), Message: ie.Message}
		}
		results[i].Err = ferr
	}
	return results, nil
}

func batchFromProto(resp *squawkv1.DecideRetryBatchResponse, n int) ([]BatchResult, error) {
	if got := len(resp.GetResults()); got != n {
		return nil, fmt.Errorf("squawk: DecideRetryBatch: the daemon answered %d results for %d requests", got, n)
	}
	results := make([]BatchResult, n)
	for i, r := range resp.GetResults() {
		switch res := r.GetResult().(type) {
		case *squawkv1.DecideRetryBatchResult_Decision:
			results[i].Decision = decisionFromProto(res.Decision)
		case *squawkv1.DecideRetryBatchResult_Error:
			field, msg := splitField(res.Error)
			results[i].Err = &InputError{Field: field, Message: msg}
		default:
			results[i].Err = fmt.Errorf("squawk: DecideRetryBatch: the daemon answered requests[%d] with neither a decision nor an error", i)
		}
	}
	return results, nil
}
