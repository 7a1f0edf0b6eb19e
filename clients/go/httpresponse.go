package squawk

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

// What the RoundTripper reads of an upstream's responses, and the response
// it makes of its own for a refused dispatch.

// maxErrorBody is the most of a failed response's body the policy is shown
// (an envelope, an error message); the SDK still gets the whole body.
const maxErrorBody = 64 * 1024

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
