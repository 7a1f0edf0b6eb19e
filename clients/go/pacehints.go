package squawk

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Coster is implemented by a step's result that knows its real cost in the
// upstream's token units (an LLM response's usage). When Run's result
// implements it, a success is reported with Cost() instead of
// RunOptions.Cost; an answer that is not a finite number from 0 to 1e9, or
// a Cost that panics, reports RunOptions.Cost: the step's result stands.
//
// An optional interface on the result rather than a RunOptions hook,
// because RunOptions is generic over the parameters only: a hook taking
// the result would have to take it as any.
type Coster interface {
	Cost() float64
}

// RateLimitHeaderer is implemented by a step's result that carries the
// upstream's response headers. When Run's result implements it, a success
// is reported with its rate-limit headers (the names holding "ratelimit"
// or "rate-limit", in any case), so the pod's pacer reads the upstream's
// quota before the upstream throttles. At most 1,024 entries are looked
// at and 64 kept; a name over 256 or a value over 8,192 characters, or
// one that is not valid UTF-8, is left out, so that a header flood or one
// odd value never gets a batch of outcomes refused. A RateLimitHeaders
// that panics reports no headers: the step's result stands.
type RateLimitHeaderer interface {
	RateLimitHeaders() map[string]string
}

// The daemon's bounds on Outcome.headers (squawk.policy.limits), and how
// many of a result's headers are looked at, at most: a flood is cut there.
const (
	maxHeaders          = 64
	maxHeaderNameChars  = 256
	maxHeaderValueChars = 8192
	maxHeadersScanned   = 1024
)

// realCost is the success's cost as result's Cost reads it, else estimated
// (no Cost method, an answer out of bounds, or a panic), as the Python
// runner's cost_of and the TypeScript runner's costOf read it.
func realCost(result any, estimated float64) (cost float64) {
	c, ok := result.(Coster)
	if !ok {
		return estimated
	}
	defer func() {
		if recover() != nil {
			cost = estimated
		}
	}()
	x := c.Cost()
	if math.IsNaN(x) || x < 0 || x > maxCost {
		return estimated
	}
	return x
}

// paceHeaders is the rate-limit headers of result's RateLimitHeaders within
// the daemon's bounds (nil without the method, or when it panics), as the
// Python runner's headers_of and the TypeScript runner's headersOf read
// them.
func paceHeaders(result any) (kept map[string]string) {
	h, ok := result.(RateLimitHeaderer)
	if !ok {
		return nil
	}
	defer func() {
		if recover() != nil {
			kept = nil
		}
	}()
	scanned := 0
	for name, value := range h.RateLimitHeaders() {
		if scanned == maxHeadersScanned || len(kept) == maxHeaders {
			break
		}
		scanned++
		lower := strings.ToLower(name)
		if (strings.Contains(lower, "ratelimit") || strings.Contains(lower, "rate-limit")) &&
			utf8.ValidString(name) && utf8.ValidString(value) &&
			utf8.RuneCountInString(name) <= maxHeaderNameChars &&
			utf8.RuneCountInString(value) <= maxHeaderValueChars {
			if kept == nil {
				kept = make(map[string]string)
			}
			kept[name] = value
		}
	}
	return kept
}
