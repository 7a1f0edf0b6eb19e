package squawk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The RoundTripper's rules with net/http alone; clients/go/sdktest runs
// them under the real openai-go SDK.

// reply is one scripted answer of a loopback API.
type reply struct {
	status  int
	headers map[string]string
	body    string
}

// scriptedAPI answers its replies in order and records each request's body.
type scriptedAPI struct {
	*httptest.Server
	mu      sync.Mutex
	replies []reply
	bodies  []string
}

func startAPI(t *testing.T, replies ...reply) *scriptedAPI {
	t.Helper()
	api := &scriptedAPI{replies: replies}
	api.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		api.mu.Lock()
		api.bodies = append(api.bodies, string(body))
		next := reply{status: http.StatusTeapot, body: "no scripted reply left"}
		if len(api.replies) > 0 {
			next, api.replies = api.replies[0], api.replies[1:]
		}
		api.mu.Unlock()
		for k, v := range next.headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(next.status)
		_, _ = io.WriteString(w, next.body)
	}))
	t.Cleanup(api.Close)
	return api
}

func (api *scriptedAPI) seen() []string {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]string(nil), api.bodies...)
}

var jsonType = map[string]string{"Content-Type": "application/json"}

func post(t *testing.T, rt http.RoundTripper, url string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRoundTripperResendsTheSameBodyAndReportsTheSuccess(t *testing.T) {
	var log callLog
	c := upstreamClient(t, log.dial())
	u := uniqueUpstream(t)
	done := `{"id": "1", "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}}`
	api := startAPI(t,
		reply{503, map[string]string{"retry-after-ms": "1", "Content-Type": "application/json"}, `{"error": {"message": "busy"}}`},
		reply{200, map[string]string{"Content-Type": "application/json", "X-RateLimit-Remaining-Requests": "199"}, done},
	)
	rt := NewRoundTripper(c, u, &RoundTripperOptions{Capability: "chat"})

	resp := post(t, rt, api.URL, strings.NewReader(`{"n": 1}`))
	if resp.StatusCode != 200 || readAll(t, resp.Body) != done {
		t.Fatalf("got HTTP %d, want the 200 and its whole body", resp.StatusCode)
	}
	if got := api.seen(); len(got) != 2 || got[0] != `{"n": 1}` || got[1] != got[0] {
		t.Fatalf("the API saw %q, want the same body twice", got)
	}
	if err := c.Close(); err != nil { // sends the held success report
		t.Fatal(err)
	}
	_, sent := log.snapshot()
	var decided *squawkv1.DecideRetryRequest
	var reported *squawkv1.Outcome
	for _, m := range sent {
		switch req := m.(type) {
		case *squawkv1.DecideRetryRequest:
			decided = req
		case *squawkv1.ReportOutcomeRequest:
			reported = req.GetOutcomes()[0]
		}
	}
	if decided.GetHttpStatus() != 503 || decided.GetHeaders()["retry-after-ms"] != "1" ||
		!strings.Contains(string(decided.GetResponseBody()), "busy") {
		t.Errorf("DecideRetry was sent %v, want the 503's status, headers and body", decided)
	}
	if reported.GetCost() != 12 || reported.GetHeaders()["x-ratelimit-remaining-requests"] != "199" ||
		reported.GetUpstream() != u || reported.GetCapability() != "chat" {
		t.Errorf("the success was reported as %v, want its usage and rate-limit headers", reported)
	}
	if rt.SDKRetries() != 0 {
		t.Errorf("SDKRetries = %d, want 0", rt.SDKRetries())
	}
}

func TestRoundTripperSendsABodyItCannotReadTwiceOnce(t *testing.T) {
	c := upstreamClient(t)
	big := strings.Repeat("x", 2*maxErrorBody) // the caller still reads all of it
	api := startAPI(t, reply{503, map[string]string{"retry-after-ms": "1"}, big}, reply{200, nil, "ok"})
	// No GetBody: the request cannot be rebuilt for a resend.
	resp := post(t, NewRoundTripper(c, uniqueUpstream(t), nil), api.URL, io.NopCloser(strings.NewReader("once")))
	if resp.StatusCode != 503 || readAll(t, resp.Body) != big {
		t.Fatalf("got HTTP %d, want the 503 with its whole body", resp.StatusCode)
	}
	if got := api.seen(); len(got) != 1 {
		t.Fatalf("the API saw %d requests, want 1", len(got))
	}
}

func TestRoundTripperResendsARequestWithoutABody(t *testing.T) {
	c := upstreamClient(t)
	api := startAPI(t, reply{503, map[string]string{"retry-after-ms": "1"}, "busy"}, reply{200, nil, "ok"})
	req, _ := http.NewRequest(http.MethodGet, api.URL, nil)
	resp, err := NewRoundTripper(c, uniqueUpstream(t), nil).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || len(api.seen()) != 2 {
		t.Fatalf("got HTTP %d after %d requests, want the 200 after 2", resp.StatusCode, len(api.seen()))
	}
}

func TestRoundTripperAnswersADispatchThePodRefusesWithItsOwn503(t *testing.T) {
	c, _ := scriptedClient(t, `{"allowed": false, "reason": "REASON_UPSTREAM_SATURATED", "retryAfter": "20s"}`)
	api := startAPI(t, reply{200, nil, "ok"})
	body := &closeRecorder{Reader: strings.NewReader("{}")}
	req, _ := http.NewRequest(http.MethodPost, api.URL, body)
	resp, err := NewRoundTripper(c, "paced", nil).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Type  string            `json:"type"`
		Error map[string]string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("x-squawk-reason") != "REASON_UPSTREAM_SATURATED" ||
		resp.Header.Get("x-should-retry") != "false" || resp.Request != req {
		t.Errorf("got HTTP %d %v, want Squawk's 503", resp.StatusCode, resp.Header)
	}
	if got.Type != "error" || got.Error["type"] != "squawk_refused" || got.Error["code"] != "REASON_UPSTREAM_SATURATED" ||
		!strings.Contains(got.Error["message"], "The pod refused the dispatch to paced") {
		t.Errorf("body %+v, want the refusal and the decision's explanation", got)
	}
	if len(api.seen()) != 0 || !body.closed {
		t.Errorf("the API saw %d requests, request body closed: %v; want none and closed", len(api.seen()), body.closed)
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (r *closeRecorder) Close() error { r.closed = true; return nil }

func TestRoundTripperReturnsTheTransportsErrorWhenNoResponseCame(t *testing.T) {
	c := upstreamClient(t)
	refused := errors.New("connection refused")
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, refused })
	rt := NewRoundTripper(c, uniqueUpstream(t), &RoundTripperOptions{MaxAttempts: new(1), Base: base})
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:9/", nil)
	if _, err := rt.RoundTrip(req); err != refused {
		t.Fatalf("RoundTrip error %v, want the transport's own", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRoundTripperCountsAndLogsOnceTheSDKsOwnRetries(t *testing.T) {
	c := upstreamClient(t)
	api := startAPI(t, reply{200, nil, "ok"}, reply{200, nil, "ok"}, reply{200, nil, "ok"})
	var logged bytes.Buffer
	rt := NewRoundTripper(c, "sdk-left-retrying", &RoundTripperOptions{
		Logger: slog.New(slog.NewTextHandler(&logged, nil)),
	})
	for _, count := range []string{"0", "1", "2"} {
		req, _ := http.NewRequest(http.MethodGet, api.URL, nil)
		req.Header.Set("X-Stainless-Retry-Count", count)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if rt.SDKRetries() != 2 {
		t.Errorf("SDKRetries = %d, want 2", rt.SDKRetries())
	}
	if n := strings.Count(logged.String(), "WithMaxRetries(0)"); n != 1 || !strings.Contains(logged.String(), "sdk-left-retrying") {
		t.Errorf("logged %q, want one warning naming the upstream", logged.String())
	}
}

func TestRoundTripperNeedsAnUpstream(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:9/", nil)
	_, err := NewRoundTripper(nil, "", nil).RoundTrip(req)
	var bad *InputError
	if !errors.As(err, &bad) || bad.Field != "upstream" {
		t.Fatalf("RoundTrip error %v, want an *InputError naming upstream", err)
	}
}

func TestUsedTokensReadsTheBodysUsage(t *testing.T) {
	for body, want := range map[string]float64{
		`{"usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}}`: 12, // OpenAI
		`{"usage": {"input_tokens": 7, "output_tokens": 5}}`:                          12, // Anthropic
		`{"usage": {"total_tokens": null, "input_tokens": 7}}`:                        7,
		`{"usage": {"total_tokens": "12"}}`:                                           0,
		`{"usage": {"input_tokens": 7, "output_tokens": null}}`:                       0,
		`{"usage": {"total_tokens": -1}}`:                                             0,
		`{"usage": {"total_tokens": 2e9}}`:                                            0,
		`{"usage": null}`:                                                             0,
		`{"usage": 12}`:                                                               0,
		`{"id": "no usage"}`:                                                          0,
		`[1, 2]`:                                                                      0,
		`not json`:                                                                    0,
	} {
		if got := usedTokens([]byte(body)); got != want {
			t.Errorf("usedTokens(%s) = %v, want %v", body, got, want)
		}
	}
}

// The daemon refuses a DecideRetry whose headers are past its bounds, so a
// response with many headers is cut to them, keeping the ones it reads.
func TestDecisionHeadersKeepWhatThePolicyReadsWithinTheDaemonsBounds(t *testing.T) {
	h := http.Header{}
	for i := range 100 {
		h.Set(fmt.Sprintf("X-Filler-%03d", i), "f")
	}
	h.Set("Retry-After", "3")
	h.Set("X-Should-Retry", "false")
	h.Set("X-RateLimit-Reset-Requests", "4s")
	h.Set("X-Long", strings.Repeat("v", maxHeaderValueChars+1))
	h.Set("X-Bad", "\xff")
	h.Add("Vary", "Origin")
	h.Add("Vary", "Accept")
	got := decisionHeaders(h)
	if len(got) != maxHeaders {
		t.Errorf("kept %d headers, want %d", len(got), maxHeaders)
	}
	for name, want := range map[string]string{
		"retry-after": "3", "x-should-retry": "false", "x-ratelimit-reset-requests": "4s", "vary": "Origin, Accept",
	} {
		if got[name] != want {
			t.Errorf("headers[%q] = %q, want %q", name, got[name], want)
		}
	}
	if _, ok := got["x-long"]; ok {
		t.Error("kept a value over the daemon's bound")
	}
	if _, ok := got["x-bad"]; ok {
		t.Error("kept a value that is not UTF-8")
	}
	// And the daemon takes them.
	c := upstreamClient(t)
	_, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503, Headers: got})
	if err != nil {
		t.Fatalf("DecideRetry with the kept headers: %v", err)
	}
}
