package squawk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
)

// An SDK behind Squawk at its HTTP layer. The official LLM SDKs
// (openai-go, anthropic-sdk-go) send every call through the *http.Client
// they are given (option.WithHTTPClient); its Transport is the one seam
// below their own retry loop. The rules are the Python client's transports'
// (squawk_client._http), so that an SDK behind Squawk behaves the same in
// every language.

// RoundTripperOptions sets the rest of each request's step; the zero value
// (or nil) runs it with the profile's budgets and http.DefaultTransport.
type RoundTripperOptions struct {
	// Profile and Capability are sent with each Admit, DecideRetry and
	// success report, as RunOptions's.
	Profile, Capability string
	// MaxAttempts is the attempt budget of each request (initial call +
	// resends); nil = the profile's. Set it with new(n); must be >= 1.
	MaxAttempts *int
	// Cost is each request's estimated cost in the upstream's token units,
	// as RunOptions.Cost: sent with each Admit; a success is reported with
	// its JSON body's usage instead. 0 = unknown; finite, 0 to 1e9.
	Cost float64
	// Base sends each attempt; nil = http.DefaultTransport.
	Base http.RoundTripper
	// Logger gets the one warning that the SDK retries on its own; nil =
	// slog.Default(), as the client's other warnings.
	Logger *slog.Logger
}

// RoundTripper is an http.RoundTripper that makes each request one step of
// Run for its upstream: admitted by the pod's pace and breaker before each
// dispatch, resent only on the policy's RETRY, and reported on success with
// its rate-limit headers and the tokens its JSON body says it used. Give it
// to an SDK with its own retries off:
//
//	http := &http.Client{Transport: squawk.NewRoundTripper(c, "openai", nil)}
//	client := openai.NewClient(option.WithHTTPClient(http), option.WithMaxRetries(0))
//
// A response of 400 or more is a failed attempt that DecideRetry answers
// from its status, the first 64 KiB of its body and its headers; on RETRY
// the same request is sent again (its body from GetBody; a request with a
// body and no GetBody is sent once). When the policy ends the step, the SDK
// gets what it would have got without Squawk: the last response (so it
// returns its own error type), or the transport's error when no response
// came. A dispatch the pod refuses before any call (a pace that cannot
// start it before the request context's deadline, an open breaker, a
// cool-down) gets a 503 of Squawk's own: header x-squawk-reason names the
// reason (REASON_UPSTREAM_SATURATED, ...), x-should-retry is false, and the
// JSON body's error.message is the decision's explanation. A 4xx is never
// rewritten: corrections belong to Run with a Correct hook around the SDK
// call. Any other end of the step (ctx ending during a wait, an error of
// Admit or DecideRetry) is returned as Run's error.
//
// The step's deadline is the request context's (the ctx given to the SDK
// call, or its request timeout). A success's body is read (and handed on
// from memory) only when its Content-Type is application/json, so a
// streamed body is never read.
//
// While a criticality is in force for the request's context (see
// CriticalityFrom), each request carries it to the next hop in header
// squawk-criticality (its name, e.g. SHEDDABLE), unless the request
// already carries that header; the caller's request is not changed.
//
// The SDKs number their own resends in X-Stainless-Retry-Count; a request
// whose count is above 0 is counted (SDKRetries) and, the first time,
// logged as a warning naming the upstream. Safe for concurrent use.
type RoundTripper struct {
	c        *Client
	upstream string
	opts     RoundTripperOptions
	base     http.RoundTripper
	log      *slog.Logger
	retries  atomic.Int64
}

// NewRoundTripper returns a RoundTripper whose requests are steps of Run
// for upstream, through c. opts may be nil. An empty upstream or options
// out of range make each RoundTrip fail with an *InputError naming the
// field.
func NewRoundTripper(c *Client, upstream string, opts *RoundTripperOptions) *RoundTripper {
	rt := &RoundTripper{c: c, upstream: upstream}
	if opts != nil {
		rt.opts = *opts
	}
	rt.base = rt.opts.Base
	if rt.base == nil {
		rt.base = http.DefaultTransport
	}
	rt.log = rt.opts.Logger
	if rt.log == nil {
		rt.log = slog.Default()
	}
	return rt
}

// SDKRetries is how many requests the SDK sent as its own resends
// (X-Stainless-Retry-Count above 0): more than 0 means its retries are on.
func (rt *RoundTripper) SDKRetries() int64 { return rt.retries.Load() }

// RoundTrip runs req as one step (see RoundTripper).
func (rt *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.upstream == "" {
		closeBody(req)
		return nil, &InputError{Field: "upstream",
			Message: `squawk: RoundTripper: name the upstream its requests call, e.g. "openai"`}
	}
	rt.notice(req)
	sent := req // what is sent: req, or a copy carrying the criticality
	if name := criticalityName(CriticalityFrom(req.Context())); name != "" &&
		len(req.Header.Values(criticalityHeader)) == 0 {
		// The level in force goes to the next hop; a RoundTripper must not
		// change the caller's request, so a copy carries it.
		sent = req.Clone(req.Context())
		sent.Header.Set(criticalityHeader, name)
	}
	opts := RunOptions[*http.Request]{
		Upstream: rt.upstream, Profile: rt.opts.Profile, Capability: rt.opts.Capability,
		MaxAttempts: rt.opts.MaxAttempts, Cost: rt.opts.Cost,
	}
	if !replayable(sent) {
		opts.MaxAttempts = new(1)
	}
	calls := 0
	var last *http.Response // the last failed response, open until superseded
	step := func(_ context.Context, r *http.Request) (httpAnswer, error) {
		calls++
		if last != nil {
			_ = last.Body.Close()
			last = nil
		}
		if calls > 1 && r.GetBody != nil {
			// A resend: the first attempt's body is spent (a request
			// without one, or with http.NoBody, is sent as it is).
			body, err := r.GetBody()
			if err != nil {
				return httpAnswer{}, fmt.Errorf("squawk: RoundTripper: a fresh request body: %w", err)
			}
			r = r.Clone(r.Context())
			r.Body = body
		}
		resp, err := rt.base.RoundTrip(r)
		if err != nil {
			return httpAnswer{}, err
		}
		if resp.StatusCode >= 400 {
			failed, err := readFailure(resp)
			if err != nil {
				return httpAnswer{}, err
			}
			last = resp
			return httpAnswer{}, failed
		}
		return readSuccess(resp)
	}
	done, err := Run(req.Context(), rt.c, sent, step, opts)
	if err == nil {
		return done.resp, nil
	}
	if calls == 0 {
		closeBody(req)
	}
	var ended *RunError
	if !errors.As(err, &ended) || ended.Cause != nil {
		if last != nil {
			_ = last.Body.Close()
		}
		return nil, err
	}
	if last != nil {
		return last, nil // the policy ended the step on this HTTP failure
	}
	if ended.Err != nil {
		return nil, ended.Err // no response came: the transport's own error
	}
	return refusal(req, ended.Decision), nil
}

// notice counts (and logs once) a request the SDK resends on its own.
func (rt *RoundTripper) notice(req *http.Request) {
	count := strings.TrimSpace(req.Header.Get("X-Stainless-Retry-Count"))
	if count == "" || count == "0" {
		return
	}
	if rt.retries.Add(1) == 1 {
		rt.log.Warn(fmt.Sprintf("squawk: the SDK calling upstream %q retries on its own: set "+
			"option.WithMaxRetries(0), so that only Squawk's policy resends (docs/sdks.md)", rt.upstream),
			"upstream", rt.upstream)
	}
}

// replayable is whether req's body can be sent again: none, or GetBody.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
