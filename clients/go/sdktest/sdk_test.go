package sdktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	squawk "github.com/squawk-dev/squawk/clients/go"
	"github.com/squawk-dev/squawk/clients/go/internal/daemontest"
	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

const (
	key = "sk-test-0000000000000000"
	// chat is a chat completion that used 12 tokens.
	chat = `{"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
		"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
		"usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}}`
)

// quota is OpenAI's dialect: 401 of 600 requests used, refilled in 4 s.
var quota = map[string]string{
	"x-ratelimit-limit-requests":     "600",
	"x-ratelimit-remaining-requests": "199",
	"x-ratelimit-reset-requests":     "4s",
}

func openaiError(message string) string {
	return fmt.Sprintf(`{"error": {"message": %q, "type": "invalid_request_error"}}`, message)
}

var target string // the daemon's address

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	addr, err := daemontest.FreeAddr()
	if err == nil {
		var policy string
		if policy, err = filepath.Abs("testdata/policy.yaml"); err == nil {
			var d *daemontest.Daemon
			if d, err = daemontest.Start("../../..", addr, addr, []string{"--policy", policy}); err == nil {
				defer d.Stop()
				target = d.Addr
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot run the Squawk daemon: %v\n", err)
		return 1
	}
	return m.Run()
}

// newClient is a client of the test daemon; a slow daemon fails the test
// instead of being answered by the local fallback.
func newClient(t *testing.T) *squawk.Client {
	t.Helper()
	c, err := squawk.New(target, squawk.WithFallbackDisabled(), squawk.WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var upstreamSeq atomic.Int64

// uniqueUpstream is an upstream name no other test uses.
func uniqueUpstream(t *testing.T) string {
	return fmt.Sprintf("%s#%d", t.Name(), upstreamSeq.Add(1))
}

// reply is one scripted answer of the stand-in API.
type reply struct {
	status  int
	headers map[string]string
	body    string
}

// chatAPI is a loopback stand-in of the chat completions API that answers
// its replies in order and records what it was sent.
type chatAPI struct {
	*httptest.Server
	mu      sync.Mutex
	replies []reply
	paths   []string
	bodies  []string
}

func startAPI(t *testing.T, replies ...reply) *chatAPI {
	t.Helper()
	api := &chatAPI{replies: replies}
	api.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		api.mu.Lock()
		api.paths = append(api.paths, r.URL.Path)
		api.bodies = append(api.bodies, string(body))
		next := reply{status: http.StatusTeapot, body: openaiError("no scripted reply left")}
		if len(api.replies) > 0 {
			next, api.replies = api.replies[0], api.replies[1:]
		}
		api.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		for k, v := range next.headers {
			w.Header().Set(k, v)
		}
		w.WriteHeader(next.status)
		_, _ = io.WriteString(w, next.body)
	}))
	t.Cleanup(api.Close)
	return api
}

func (api *chatAPI) seen() (paths, bodies []string) {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]string(nil), api.paths...), append([]string(nil), api.bodies...)
}

// sdk is the openai SDK behind rt, with sdkRetries retries of its own.
func sdk(baseURL string, rt http.RoundTripper, sdkRetries int) openai.Client {
	return openai.NewClient(
		option.WithAPIKey(key),
		option.WithBaseURL(baseURL+"/v1/"),
		option.WithHTTPClient(&http.Client{Transport: rt}),
		option.WithMaxRetries(sdkRetries),
	)
}

func ask(ctx context.Context, client openai.Client) (string, error) {
	done, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if err != nil {
		return "", err
	}
	return done.Choices[0].Message.Content, nil
}

func TestAnOpenAICallIsResentOnA429AndItsHeadersPaceTheUpstream(t *testing.T) {
	api := startAPI(t,
		reply{429, map[string]string{"retry-after-ms": "20"}, openaiError("slow down")},
		reply{200, quota, chat},
	)
	c := newClient(t)
	u := uniqueUpstream(t)
	// The user's code: the RoundTripper, and the SDK with its own retries off.
	rt := squawk.NewRoundTripper(c, u, nil)
	client := openai.NewClient(
		option.WithAPIKey(key),
		option.WithBaseURL(api.URL+"/v1/"),
		option.WithHTTPClient(&http.Client{Transport: rt}),
		option.WithMaxRetries(0),
	)
	got, err := ask(context.Background(), client)
	if err != nil || got != "hello" {
		t.Fatalf("ask = %q, %v; want hello", got, err)
	}
	paths, bodies := api.seen()
	if len(bodies) != 2 || bodies[1] != bodies[0] || paths[0] != "/v1/chat/completions" {
		t.Fatalf("the API saw %q %q, want the same chat completion twice", paths, bodies)
	}
	if rt.SDKRetries() != 0 {
		t.Errorf("SDKRetries = %d, want 0", rt.SDKRetries())
	}
	// The success was reported with its quota (Close sends the held
	// report): the pace now follows the headers.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	states, err := newClient(t).GetUpstreams(context.Background(),
		&squawkv1.GetUpstreamsRequest{Profile: "default", Upstream: u})
	if err != nil || len(states) != 1 {
		t.Fatalf("GetUpstreams = %v, %v; want the upstream", states, err)
	}
	if s := states[0].GetPaceSource(); s != squawkv1.PaceSource_PACE_SOURCE_HEADERS {
		t.Errorf("pace source %v, want PACE_SOURCE_HEADERS", s)
	}
}

func TestAFailureThePolicyEndsReachesTheSDKAsItsOwnErrorAfterOneCall(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply reply
	}{
		{"a 400 is never resent unchanged", reply{400, nil, openaiError("bad model")}},
		{"x-should-retry false is obeyed", reply{503, map[string]string{"x-should-retry": "false"}, openaiError("busy")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := startAPI(t, tc.reply, reply{200, nil, chat})
			_, err := ask(context.Background(), sdk(api.URL, squawk.NewRoundTripper(newClient(t), uniqueUpstream(t), nil), 0))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("ask error %v (%T), want an *openai.Error", err, err)
			}
			if apiErr.StatusCode != tc.reply.status || !strings.Contains(tc.reply.body, apiErr.Message) || apiErr.Message == "" {
				t.Errorf("*openai.Error %d %q, want the API's %d and its message", apiErr.StatusCode, apiErr.Message, tc.reply.status)
			}
			if _, bodies := api.seen(); len(bodies) != 1 {
				t.Errorf("the API saw %d requests, want 1", len(bodies))
			}
		})
	}
}

func TestAShedCallGetsSquawksOwn503AndNeverReachesTheUpstream(t *testing.T) {
	api := startAPI(t, reply{200, nil, chat}, reply{200, nil, chat})
	rt := squawk.NewRoundTripper(newClient(t), uniqueUpstream(t), &squawk.RoundTripperOptions{Profile: "paced"})
	client := sdk(api.URL, rt, 2) // retries left on: x-should-retry false holds them
	if got, err := ask(context.Background(), client); err != nil || got != "hello" {
		t.Fatalf("first ask = %q, %v; want hello", got, err)
	}
	// One call in 20 s, and this step may wait a second: it is shed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := ask(ctx, client)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("second ask error %v (%T), want an *openai.Error", err, err)
	}
	h := apiErr.Response.Header
	if apiErr.StatusCode != 503 || h.Get("x-squawk-reason") != "REASON_UPSTREAM_SATURATED" || h.Get("x-should-retry") != "false" {
		t.Errorf("*openai.Error %d %v, want Squawk's 503", apiErr.StatusCode, h)
	}
	if apiErr.Code != "REASON_UPSTREAM_SATURATED" || !strings.HasPrefix(apiErr.Message, "The pod ") {
		t.Errorf("error code %q message %q, want the reason and the decision's explanation", apiErr.Code, apiErr.Message)
	}
	if _, bodies := api.seen(); len(bodies) != 1 {
		t.Errorf("the API saw %d requests, want 1", len(bodies))
	}
	if rt.SDKRetries() != 0 {
		t.Errorf("SDKRetries = %d, want 0: the SDK resent Squawk's 503", rt.SDKRetries())
	}
}

func TestNoResponseReachesTheSDKAsTheTransportsError(t *testing.T) {
	addr, err := daemontest.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	rt := squawk.NewRoundTripper(newClient(t), uniqueUpstream(t), &squawk.RoundTripperOptions{MaxAttempts: new(1)})
	_, err = ask(context.Background(), sdk("http://"+addr, rt, 0))
	var apiErr *openai.Error
	if err == nil || errors.As(err, &apiErr) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("ask error %v, want the transport's connection error", err)
	}
}

func TestAnSDKLeftRetryingOnItsOwnIsCountedAndLoggedOnce(t *testing.T) {
	// Squawk ends each step at its first 503 (one attempt); the SDK resends.
	busy := reply{503, map[string]string{"retry-after-ms": "1"}, openaiError("busy")}
	api := startAPI(t, busy, busy, busy)
	var logged bytes.Buffer
	rt := squawk.NewRoundTripper(newClient(t), "openai-retrying", &squawk.RoundTripperOptions{
		MaxAttempts: new(1),
		Logger:      slog.New(slog.NewTextHandler(&logged, nil)),
	})
	_, err := ask(context.Background(), sdk(api.URL, rt, 2))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Fatalf("ask error %v, want the 503 as an *openai.Error", err)
	}
	if _, bodies := api.seen(); len(bodies) != 3 {
		t.Errorf("the API saw %d requests, want 3", len(bodies))
	}
	if rt.SDKRetries() != 2 {
		t.Errorf("SDKRetries = %d, want 2", rt.SDKRetries())
	}
	if n := strings.Count(logged.String(), "option.WithMaxRetries(0)"); n != 1 || !strings.Contains(logged.String(), "openai-retrying") {
		t.Errorf("logged %q, want one warning naming the upstream", logged.String())
	}
}
