package squawk

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// eachMode runs f against the real daemon and against the local fallback
// (a loopback port nothing listens on).
func eachMode(t *testing.T, f func(t *testing.T, c *Client, fallback bool)) {
	t.Run("daemon", func(t *testing.T) { f(t, daemonClient(t), false) })
	t.Run("fallback", func(t *testing.T) { f(t, deadClient(t), true) })
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantInputError(t *testing.T, err error, field string) {
	t.Helper()
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("err = %v, want an *InputError naming %q", err, field)
	}
	if ie.Field != field {
		t.Errorf("InputError.Field = %q, want %q (error: %v)", ie.Field, field, err)
	}
	if code := status.Code(err); code != codes.InvalidArgument {
		t.Errorf("status code %v, want InvalidArgument", code)
	}
}

func TestDecideRetryBatch(t *testing.T) {
	check := func(t *testing.T, c *Client, fallback bool) {
		results, err := c.DecideRetryBatch(context.Background(), &squawkv1.DecideRetryBatchRequest{
			Requests: []*squawkv1.DecideRetryRequest{
				{Attempt: 1, HttpStatus: 503},
				{Attempt: 0, HttpStatus: 503}, // refused alone
				{Attempt: 1, HttpStatus: 401},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 3 {
			t.Fatalf("%d results, want 3", len(results))
		}
		first, third := results[0], results[2]
		if first.Err != nil || first.Decision.Action != squawkv1.Action_ACTION_RETRY ||
			first.Decision.Reason != squawkv1.Reason_REASON_TRANSIENT_STATUS || first.Decision.Delay != 542*time.Millisecond {
			t.Errorf("results[0] = %+v, want RETRY after 542ms (TRANSIENT_STATUS)", first)
		}
		wantInputError(t, results[1].Err, "requests[1].attempt")
		if third.Err != nil || third.Decision.Action != squawkv1.Action_ACTION_FAIL ||
			third.Decision.Reason != squawkv1.Reason_REASON_TERMINAL_STATUS {
			t.Errorf("results[2] = %+v, want FAIL (TERMINAL_STATUS)", third)
		}
		for i, r := range []BatchResult{first, third} {
			if r.Decision.Fallback != fallback {
				t.Errorf("decision %d: Fallback = %v", i, r.Decision.Fallback)
			}
		}
		want := int64(0)
		if fallback {
			want = 2 // the refused item is no decision
		}
		if got := c.FallbackCount(); got != want {
			t.Errorf("FallbackCount = %d, want %d", got, want)
		}
	}
	eachMode(t, check)
	// A daemon that answers CANCELLED did not decide: the fallback decides each item.
	t.Run("cancelled", func(t *testing.T) {
		check(t, newClient(t, answering(t, codes.Canceled), WithCallTimeout(5*time.Second)), true)
	})
}

func TestDecideRetryBatchRefusedWhole(t *testing.T) {
	eachMode(t, func(t *testing.T, c *Client, fallback bool) {
		ctx := context.Background()
		_, err := c.DecideRetryBatch(ctx, nil)
		wantInputError(t, err, "request")
		_, err = c.DecideRetryBatch(ctx, &squawkv1.DecideRetryBatchRequest{
			Requests: []*squawkv1.DecideRetryRequest{{Attempt: 1}, nil},
		})
		wantInputError(t, err, "requests[1]")
		tooMany := make([]*squawkv1.DecideRetryRequest, MaxBatch+1)
		for i := range tooMany {
			tooMany[i] = &squawkv1.DecideRetryRequest{Attempt: 1}
		}
		_, err = c.DecideRetryBatch(ctx, &squawkv1.DecideRetryBatchRequest{Requests: tooMany})
		wantInputError(t, err, "requests")
		if n := c.FallbackCount(); n != 0 {
			t.Errorf("refused batches counted %d fallback decisions", n)
		}
	})
}

func TestDecideRetryInputErrorField(t *testing.T) {
	eachMode(t, func(t *testing.T, c *Client, _ bool) {
		_, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 0, HttpStatus: 503})
		wantInputError(t, err, "attempt")
		// The field travels in the standard detail too, for callers that
		// read statuses rather than Go types.
		wantBadRequest(t, err, "attempt")
	})
}

// wantBadRequest checks that err's gRPC status carries one
// google.rpc.BadRequest violation of field.
func wantBadRequest(t *testing.T, err error, field string) {
	t.Helper()
	details := status.Convert(err).Details()
	for _, d := range details {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) == 1 &&
			br.GetFieldViolations()[0].GetField() == field && br.GetFieldViolations()[0].GetDescription() != "" {
			return
		}
	}
	t.Errorf("status details %v, want one BadRequest violation of %q", details, field)
}

func TestDaemonAnalyzeError(t *testing.T) {
	c := daemonClient(t)
	ctx := context.Background()
	resp, err := c.AnalyzeError(ctx, &squawkv1.AnalyzeErrorRequest{
		HttpStatus:      400,
		ErrorResponse:   `{"error": "INVALID CITY CODE"}`,
		OriginalRequest: mustStruct(t, map[string]any{"city_code": "PARIS"}),
		ParameterSchema: mustStruct(t, map[string]any{
			"type":       "object",
			"properties": map[string]any{"city_code": map[string]any{"type": "string", "enum": []any{"PAR", "LON", "NYC"}}},
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetShouldRetry() || resp.GetSuggestedChanges().GetFields()["city_code"].GetStringValue() != "PAR" {
		t.Errorf("AnalyzeError = %v, want city_code PARIS -> PAR", resp)
	}
	// A 503 is resent unchanged: nothing to analyse.
	resp, err = c.AnalyzeError(ctx, &squawkv1.AnalyzeErrorRequest{HttpStatus: 503})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetShouldRetry() || !resp.GetIsTransientError() {
		t.Errorf("AnalyzeError(503) = %v, want should_retry false, is_transient_error true", resp)
	}
	// The counters are bounded to 0..1,000.
	for _, used := range []int32{-1, 1001} {
		_, err = c.AnalyzeError(ctx, &squawkv1.AnalyzeErrorRequest{HttpStatus: 400, ValidationRetriesUsed: used})
		wantInputError(t, err, "validation_retries_used")
		wantBadRequest(t, err, "validation_retries_used")
	}
	_, err = c.AnalyzeError(ctx, nil)
	wantInputError(t, err, "request")
}

func TestDaemonCheckDispatch(t *testing.T) {
	c := daemonClient(t)
	ctx := context.Background()
	schema := mustStruct(t, map[string]any{
		"type":       "object",
		"required":   []any{"city"},
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
	})
	resp, err := c.CheckDispatch(ctx, &squawkv1.CheckDispatchRequest{
		Parameters:      mustStruct(t, map[string]any{"city": "{{step-1.city}}"}),
		ParameterSchema: schema,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOk() || len(resp.GetViolations()) != 1 ||
		resp.GetViolations()[0].GetParameter() != "city" || resp.GetViolations()[0].GetRule() != "unresolved_reference" {
		t.Errorf("CheckDispatch = %v, want one unresolved_reference violation of city", resp)
	}
	resp, err = c.CheckDispatch(ctx, &squawkv1.CheckDispatchRequest{
		Parameters:      mustStruct(t, map[string]any{"city": "PAR"}),
		ParameterSchema: schema,
	})
	if err != nil || !resp.GetOk() {
		t.Errorf("CheckDispatch = %v, %v; want ok", resp, err)
	}
	_, err = c.CheckDispatch(ctx, nil)
	wantInputError(t, err, "request")
}

// Only DecideRetry decides locally: the other calls surface the daemon's
// absence instead of inventing an answer.
func TestCallsWithoutFallback(t *testing.T) {
	c := deadClient(t)
	ctx := context.Background()
	_, err := c.Classify(ctx, &squawkv1.ClassifyRequest{HttpStatus: 503})
	wantDaemonDown(t, "Classify", err)
	_, err = c.AnalyzeError(ctx, &squawkv1.AnalyzeErrorRequest{HttpStatus: 400})
	wantDaemonDown(t, "AnalyzeError", err)
	_, err = c.CheckDispatch(ctx, &squawkv1.CheckDispatchRequest{})
	wantDaemonDown(t, "CheckDispatch", err)
	if n := c.FallbackCount(); n != 0 {
		t.Errorf("FallbackCount = %d, want 0", n)
	}
}

func wantDaemonDown(t *testing.T, method string, err error) {
	t.Helper()
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("%s: err = %v (code %v), want UNAVAILABLE or DEADLINE_EXCEEDED", method, err, code)
	}
}
