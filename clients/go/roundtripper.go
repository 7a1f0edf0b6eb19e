package squawk

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"
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

// maxErrorBody is the most of a failed response's body the policy is shown
// (an envelope, an error message); the SDK still gets the whole body.
const maxErrorBody = 64 * 1024

// RoundTrip runs req as one step (see RoundTripper).
func (rt *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt.upstream == "" {
		closeBody(req)
		return nil, &InputError{Field: "upstream",
			Message: `squawk: RoundTripper: name the upstream its requests call, e.g. "openai"`}
	}
	rt.notice(req)
	opts := RunOptions[*http.Request]{
		Upstream: rt.upstream, Profile: rt.opts.Profile, Capability: rt.opts.Capability,
		MaxAttempts: rt.opts.MaxAttempts, Cost: rt.opts.Cost,
	}
	if !replayable(req) {
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
	done, err := Run(req.Context(), rt.c, req, step, opts)
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

// readFailure is the failed attempt resp is for DecideRetry: its status,
// headers and first maxErrorBody bytes, which resp's body still yields
// (then the rest) to whoever reads it next.
func readFailure(resp *http.Response) (*StepError, error) {
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return &StepError{HTTPStatus: resp.StatusCode, Body: head, Headers: decisionHeaders(resp.Header)}, nil
}

// readSuccess is a success with its cost: a JSON body is read into memory
// (the SDK reads it next, from there); any other, a stream included, is
// left unread at cost 0 (unknown).
func readSuccess(resp *http.Response) (httpAnswer, error) {
	if !jsonContent(resp.Header) {
		return httpAnswer{resp: resp}, nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return httpAnswer{}, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return httpAnswer{resp: resp, cost: usedTokens(body)}, nil
}

// httpAnswer is a success as Run reports it (see Coster, RateLimitHeaderer).
type httpAnswer struct {
	resp *http.Response
	cost float64
}

func (a httpAnswer) Cost() float64                       { return a.cost }
func (a httpAnswer) RateLimitHeaders() map[string]string { return flatHeaders(a.resp.Header) }

func jsonContent(h http.Header) bool {
	kind, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(kind), "application/json")
}

// usedTokens is the tokens a JSON body's usage states: OpenAI's
// total_tokens, else Anthropic's input_tokens + output_tokens; 0 (unknown)
// for anything else, or a count out of 0 to 1e9.
func usedTokens(body []byte) float64 {
	var parsed struct {
		Usage map[string]any `json:"usage"`
	}
	if json.Unmarshal(body, &parsed) != nil {
		return 0
	}
	number := func(name string) (float64, bool) {
		v, present := parsed.Usage[name]
		if !present {
			return 0, true
		}
		x, ok := v.(float64)
		return x, ok
	}
	tokens, ok := 0.0, true
	if total, present := parsed.Usage["total_tokens"]; present && total != nil {
		tokens, ok = total.(float64)
	} else {
		in, inOK := number("input_tokens")
		out, outOK := number("output_tokens")
		tokens, ok = in+out, inOK && outOK
	}
	if !ok || tokens < 0 || tokens > maxCost {
		return 0
	}
	return tokens
}

// flatHeaders is h with lower-case names and each name's values joined by
// ", ", as HTTP folds them.
func flatHeaders(h http.Header) map[string]string {
	flat := make(map[string]string, len(h))
	for name, values := range h {
		flat[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	return flat
}

// decisionHeaders is h (see flatHeaders) within the daemon's bounds on
// DecideRetryRequest.headers, which refuses the whole request past them: at
// most 64, each name at most 256 and each value 8,192 characters of valid
// UTF-8. The names the policy reads are kept first (the wait hints and
// x-should-retry, which hold "retry", then the rate-limit headers), so
// that a response with many headers keeps them.
func decisionHeaders(h http.Header) map[string]string {
	rank := func(name string) int {
		switch {
		case strings.Contains(name, "retry"):
			return 0
		case strings.Contains(name, "ratelimit") || strings.Contains(name, "rate-limit"):
			return 1
		}
		return 2
	}
	flat := flatHeaders(h)
	names := make([]string, 0, len(flat))
	for name, value := range flat {
		if utf8.ValidString(name) && utf8.ValidString(value) &&
			utf8.RuneCountInString(name) <= maxHeaderNameChars &&
			utf8.RuneCountInString(value) <= maxHeaderValueChars {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b)) })
	kept := make(map[string]string, min(len(names), maxHeaders))
	for _, name := range names[:min(len(names), maxHeaders)] {
		kept[name] = flat[name]
	}
	return kept
}

// refusal is Squawk's own 503 for a dispatch the pod refused before any
// call: the SDK reads it as the upstream's error, and does not resend it.
func refusal(req *http.Request, d Decision) *http.Response {
	reason := d.Reason.String()
	body, _ := json.Marshal(map[string]any{
		"type": "error",
		"error": map[string]string{
			"type":    "squawk_refused",
			"code":    reason,
			"message": d.Explanation,
		},
	})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Should-Retry", "false")
	h.Set("X-Squawk-Reason", reason)
	return &http.Response{
		Status:     "503 Service Unavailable",
		StatusCode: http.StatusServiceUnavailable,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
