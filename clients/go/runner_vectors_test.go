package squawk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The step runner's shared vectors; their cases are never copied here.
var runnerVectorPath = filepath.Join(repoRoot, "tests", "vectors", "runner.json")

type runnerFile struct {
	About string       `json:"about"`
	Cases []runnerCase `json:"cases"`
}

type runnerCase struct {
	Name           string           `json:"name"`
	Params         json.RawMessage  `json:"params"`
	Steps          []runnerStep     `json:"steps"`
	Options        runnerOptions    `json:"options"`
	Correct        *[]jsonParams    `json:"correct"`
	OnError        *[]string        `json:"onError"`
	Expect         runnerExpect     `json:"expect"`
	FallbackExpect *json.RawMessage `json:"fallback"`
	// DaemonAnswers, when set, is the gRPC status a loopback server answers
	// every call with; the case runs only against it.
	DaemonAnswers string `json:"daemonAnswers"`
	// AdmitAnswers, when set, are the AdmitResponses (proto3 JSON) a
	// loopback server answers each Admit with, in order; the case runs only
	// against it (see scriptedDaemon).
	AdmitAnswers []json.RawMessage `json:"admitAnswers"`
}

type jsonParams = map[string]any

type runnerStep struct {
	OK bool `json:"ok"`
	// Cost and Headers, on an OK step, are what its result carries: the
	// runner reads them through Coster and RateLimitHeaderer.
	Cost    *float64          `json:"cost"`
	Headers map[string]string `json:"headers"`
	Fail    *struct {
		HTTPStatus       int               `json:"httpStatus"`
		TransportFailure bool              `json:"transportFailure"`
		Body             string            `json:"body"`
		Headers          map[string]string `json:"headers"`
	} `json:"fail"`
	Raise *string `json:"raise"`
}

type runnerOptions struct {
	MaxAttempts           *int    `json:"maxAttempts"`
	MaxValidationRetries  *int    `json:"maxValidationRetries"`
	Deadline              string  `json:"deadline"`
	Capability            string  `json:"capability"`
	Upstream              string  `json:"upstream"`
	Profile               string  `json:"profile"`
	Cost                  float64 `json:"cost"`
	Criticality           string  `json:"criticality"`
	FairnessKey           string  `json:"fairnessKey"`
	FairnessWeight        float64 `json:"fairnessWeight"`
	HITLApproved          bool    `json:"hitlApproved"`
	DelegatedOrchestrator bool    `json:"delegatedOrchestrator"`
}

type runnerExpect struct {
	Dispatches  []jsonParams      `json:"dispatches"`
	WaitsMs     *[]int64          `json:"waitsMs"`
	Requests    []json.RawMessage `json:"requests"`
	OnErrorSeen *[]seenError      `json:"onErrorSeen"`
	// AdmitRequests and Reported are stated only by admitAnswers cases.
	AdmitRequests []json.RawMessage `json:"admitRequests"`
	Reported      []json.RawMessage `json:"reported"`
	Outcome       struct {
		OK     bool `json:"ok"`
		Failed *struct {
			Action string `json:"action"`
			Reason string `json:"reason"`
			Calls  int    `json:"calls"`
		} `json:"failed"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	} `json:"outcome"`
}

type seenError struct {
	Attempt         int    `json:"attempt"`
	CorrectionsUsed int    `json:"correctionsUsed"`
	Action          string `json:"action"`
	Reason          string `json:"reason"`
}

func loadRunnerVectors(t *testing.T) []runnerCase {
	t.Helper()
	raw, err := os.ReadFile(runnerVectorPath)
	if err != nil {
		t.Fatalf("read the runner vectors: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a key this test does not know would go unchecked
	var f runnerFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("parse %s: %v", runnerVectorPath, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s has no cases", runnerVectorPath)
	}
	return f.Cases
}

// expectFor is the case's expectation in the daemon or the fallback mode.
func (c runnerCase) expectFor(t *testing.T, fallback bool) runnerExpect {
	t.Helper()
	if !fallback || c.FallbackExpect == nil {
		return c.Expect
	}
	dec := json.NewDecoder(bytes.NewReader(*c.FallbackExpect))
	dec.DisallowUnknownFields()
	var e runnerExpect
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("parse the fallback expectation: %v", err)
	}
	return e
}

// requestRecorder is a client interceptor that keeps every DecideRetry
// request as it leaves for the wire, whether or not the daemon answers.
type requestRecorder struct {
	mu   sync.Mutex
	reqs []*squawkv1.DecideRetryRequest
}

func (r *requestRecorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if m, ok := req.(*squawkv1.DecideRetryRequest); ok {
		r.mu.Lock()
		r.reqs = append(r.reqs, proto.Clone(m).(*squawkv1.DecideRetryRequest))
		r.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func TestRunnerVectors(t *testing.T) {
	cases := loadRunnerVectors(t)
	d := requireDaemon(t)
	for _, mode := range []struct {
		name     string
		fallback bool
	}{{"daemon", false}, {"fallback", true}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, tc := range cases {
				if tc.DaemonAnswers != "" || tc.AdmitAnswers != nil {
					continue
				}
				t.Run(tc.Name, func(t *testing.T) {
					var rec requestRecorder
					dial := WithDialOptions(grpc.WithChainUnaryInterceptor(rec.intercept))
					var c *Client
					if mode.fallback {
						c = deadClient(t, dial)
					} else {
						// A slow daemon fails the case instead of being answered locally.
						c = newClient(t, d.addr, dial, WithFallbackDisabled(), WithCallTimeout(10*time.Second))
					}
					runCase(t, c, &rec, tc, tc.expectFor(t, mode.fallback), mode.fallback, nil)
				})
			}
		})
	}
}

// TestRunnerVectorsDaemonStatus runs each daemonAnswers case against a
// loopback gRPC server that answers every call with the case's status, as
// a daemon (or a proxy) that did not decide would.
func TestRunnerVectorsDaemonStatus(t *testing.T) {
	for _, tc := range loadRunnerVectors(t) {
		if tc.DaemonAnswers == "" {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			var rec requestRecorder
			dial := WithDialOptions(grpc.WithChainUnaryInterceptor(rec.intercept))
			c := newClient(t, answering(t, mustCode(t, tc.DaemonAnswers)), dial, WithCallTimeout(10*time.Second))
			runCase(t, c, &rec, tc, tc.Expect, tc.Expect.Outcome.Error == nil, nil)
		})
	}
}

// TestRunnerVectorsAdmitAnswers runs each admitAnswers case against a
// scriptedDaemon: the pod's pace as the runner sees it, without a daemon
// that would have to be driven into pacing.
func TestRunnerVectorsAdmitAnswers(t *testing.T) {
	ran := 0
	for _, tc := range loadRunnerVectors(t) {
		if tc.AdmitAnswers == nil {
			continue
		}
		ran++
		t.Run(tc.Name, func(t *testing.T) {
			sd := startScripted(t, tc.AdmitAnswers)
			var rec requestRecorder
			dial := WithDialOptions(grpc.WithChainUnaryInterceptor(rec.intercept))
			// Generous: a busy machine must not turn a scripted answer
			// into a fallback.
			c := newClient(t, sd.addr, dial, WithCallTimeout(10*time.Second))
			runCase(t, c, &rec, tc, tc.Expect, true, sd)
		})
	}
	if ran == 0 {
		t.Fatal("no admitAnswers case in the runner vectors")
	}
}

// scriptedDaemon is a loopback squawk.v1 server that answers each Admit
// with the next scripted AdmitResponse, every DecideRetry with UNAVAILABLE
// (so the client's local fallback decides), and each ReportOutcome by
// recording its outcomes.
type scriptedDaemon struct {
	squawkv1.UnimplementedPolicyServiceServer
	addr string

	mu       sync.Mutex
	answers  []json.RawMessage
	admits   []*squawkv1.AdmitRequest
	reported []*squawkv1.Outcome
	batches  []int // the outcomes of each ReportOutcome, in order
	problems []string
}

func startScripted(t *testing.T, answers []json.RawMessage) *scriptedDaemon {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sd := &scriptedDaemon{addr: l.Addr().String(), answers: answers}
	s := grpc.NewServer()
	squawkv1.RegisterPolicyServiceServer(s, sd)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return sd
}

func (sd *scriptedDaemon) Admit(_ context.Context, req *squawkv1.AdmitRequest) (*squawkv1.AdmitResponse, error) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	sd.admits = append(sd.admits, proto.Clone(req).(*squawkv1.AdmitRequest))
	if len(sd.answers) == 0 {
		sd.problems = append(sd.problems, fmt.Sprintf("Admit %d is past the case's admitAnswers", len(sd.admits)))
		return nil, status.Error(codes.FailedPrecondition, "no scripted answer left")
	}
	next := sd.answers[0]
	sd.answers = sd.answers[1:]
	var resp squawkv1.AdmitResponse
	if err := protojson.Unmarshal(next, &resp); err != nil {
		sd.problems = append(sd.problems, fmt.Sprintf("admitAnswers[%d]: %v", len(sd.admits)-1, err))
		return nil, status.Error(codes.FailedPrecondition, "unreadable scripted answer")
	}
	return &resp, nil
}

func (sd *scriptedDaemon) DecideRetry(context.Context, *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
	return nil, status.Error(codes.Unavailable, "scripted: decide locally")
}

func (sd *scriptedDaemon) ReportOutcome(_ context.Context, req *squawkv1.ReportOutcomeRequest) (*squawkv1.ReportOutcomeResponse, error) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	for _, o := range req.GetOutcomes() {
		sd.reported = append(sd.reported, proto.Clone(o).(*squawkv1.Outcome))
	}
	sd.batches = append(sd.batches, len(req.GetOutcomes()))
	return &squawkv1.ReportOutcomeResponse{Recorded: int32(len(req.GetOutcomes()))}, nil
}

// check compares what the server saw with the case's admitRequests and
// reported, once the client is closed.
func (sd *scriptedDaemon) check(t *testing.T, want runnerExpect) {
	t.Helper()
	sd.mu.Lock()
	defer sd.mu.Unlock()
	for _, p := range sd.problems {
		t.Error(p)
	}
	if want.AdmitRequests != nil {
		if len(sd.admits) != len(want.AdmitRequests) {
			t.Errorf("%d Admit requests sent, want %d", len(sd.admits), len(want.AdmitRequests))
		}
		for i := range min(len(sd.admits), len(want.AdmitRequests)) {
			t.Run(fmt.Sprintf("admit %d", i+1), func(t *testing.T) { checkAdmitRequest(t, want.AdmitRequests[i], sd.admits[i]) })
		}
	}
	if want.Reported != nil {
		if len(sd.reported) != len(want.Reported) {
			t.Errorf("%d outcomes reported, want %d", len(sd.reported), len(want.Reported))
		}
		for i := range min(len(sd.reported), len(want.Reported)) {
			t.Run(fmt.Sprintf("outcome %d", i+1), func(t *testing.T) { checkReported(t, want.Reported[i], sd.reported[i]) })
		}
	}
}

// scriptedResult is a step's result that carries its real cost and its
// response headers, as a case's {"ok": true, "cost": n, "headers": {...}}
// scripts it.
type scriptedResult struct {
	cost    float64
	headers map[string]string
}

func (r scriptedResult) Cost() float64                       { return r.cost }
func (r scriptedResult) RateLimitHeaders() map[string]string { return r.headers }

// checkReported is checkExpect with the vectors' two keys for an
// Outcome's headers: "headers" is compared whole, "headerCount" counts them.
func checkReported(t *testing.T, want json.RawMessage, got *squawkv1.Outcome) {
	t.Helper()
	var w map[string]json.RawMessage
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("reported entry is not an object: %v", err)
	}
	if raw, ok := w["headers"]; ok {
		delete(w, "headers")
		var headers map[string]string
		if err := json.Unmarshal(raw, &headers); err != nil {
			t.Fatalf("headers: %v", err)
		}
		if !reflect.DeepEqual(nonNilMap(got.GetHeaders()), nonNilMap(headers)) {
			t.Errorf("headers = %v, want %v", got.GetHeaders(), headers)
		}
	}
	if raw, ok := w["headerCount"]; ok {
		delete(w, "headerCount")
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			t.Fatalf("headerCount: %v", err)
		}
		if len(got.GetHeaders()) != n {
			t.Errorf("%d headers reported, want %d", len(got.GetHeaders()), n)
		}
	}
	rest, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	checkExpect(t, rest, got)
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// checkAdmitRequest is checkExpect with the vectors' one extra key:
// "deadlineAtMost" says the deadline is set, above zero and at most that.
func checkAdmitRequest(t *testing.T, want json.RawMessage, got *squawkv1.AdmitRequest) {
	t.Helper()
	var w map[string]json.RawMessage
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("admitRequests entry is not an object: %v", err)
	}
	if limit, ok := w["deadlineAtMost"]; ok {
		delete(w, "deadlineAtMost")
		most, err := jsonDuration(limit)
		if err != nil {
			t.Fatalf("deadlineAtMost: %v", err)
		}
		if d := got.GetDeadline(); d == nil || d.AsDuration() <= 0 || d.AsDuration() > most {
			t.Errorf("deadline = %v, want set, above zero and at most %v", d.AsDuration(), most)
		}
	}
	rest, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	checkExpect(t, rest, got)
}

// answering starts a loopback gRPC server that answers every call, of any
// service, with code and no message, and returns its address.
func answering(t *testing.T, code codes.Code) string {
	t.Helper()
	addr, _ := answeringCounted(t, code)
	return addr
}

// answeringCounted is answering, with the number of calls the server
// received so far.
func answeringCounted(t *testing.T, code codes.Code) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	s := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		calls.Add(1)
		return status.Error(code, "scripted status")
	}))
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String(), &calls
}

// runCase runs one case on c. fallback says whether the decisions come
// from the local fallback; sd is the scripted server of an admitAnswers
// case, nil otherwise.
func runCase(t *testing.T, c *Client, rec *requestRecorder, tc runnerCase, want runnerExpect, fallback bool, sd *scriptedDaemon) {
	if sd == nil && (want.AdmitRequests != nil || want.Reported != nil) {
		t.Fatal("admitRequests and reported are checked only in an admitAnswers case")
	}
	var params jsonParams
	if err := json.Unmarshal(tc.Params, &params); err != nil {
		t.Fatalf("params: %v", err)
	}
	var dispatches []jsonParams
	var waits []int64
	var seen []seenError
	step := func(_ context.Context, p jsonParams) (any, error) {
		dispatches = append(dispatches, p)
		i := len(dispatches) - 1
		if i >= len(tc.Steps) {
			t.Fatalf("step called %d times; the case scripts %d", i+1, len(tc.Steps))
		}
		switch s := tc.Steps[i]; {
		case s.OK && s.Cost != nil:
			return scriptedResult{cost: *s.Cost, headers: s.Headers}, nil
		case s.OK:
			return "done", nil
		case s.Fail != nil:
			return "", &StepError{HTTPStatus: s.Fail.HTTPStatus, TransportFailure: s.Fail.TransportFailure,
				Body: []byte(s.Fail.Body), Headers: s.Fail.Headers}
		case s.Raise != nil:
			return "", errors.New(*s.Raise)
		}
		t.Fatalf("step %d scripts nothing", i)
		return "", nil
	}
	opts := RunOptions[jsonParams]{
		MaxAttempts:           tc.Options.MaxAttempts,
		MaxValidationRetries:  tc.Options.MaxValidationRetries,
		Capability:            tc.Options.Capability,
		Upstream:              tc.Options.Upstream,
		Profile:               tc.Options.Profile,
		Cost:                  tc.Options.Cost,
		Criticality:           vectorCriticality(t, tc.Options.Criticality),
		FairnessKey:           tc.Options.FairnessKey,
		FairnessWeight:        tc.Options.FairnessWeight,
		HITLApproved:          tc.Options.HITLApproved,
		DelegatedOrchestrator: tc.Options.DelegatedOrchestrator,
		Sleep: func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d.Round(time.Millisecond).Milliseconds())
			return ctx.Err()
		},
	}
	if tc.Correct != nil {
		fixes := *tc.Correct
		opts.Correct = func(_ context.Context, _ jsonParams, _ error, _ Decision) (jsonParams, error) {
			if len(fixes) == 0 {
				t.Fatal("the correction hook was called more often than the case allows")
			}
			next := fixes[0]
			fixes = fixes[1:]
			return next, nil
		}
	}
	if tc.OnError != nil {
		verdicts := *tc.OnError
		opts.OnError = func(info ErrorInfo) Tier {
			seen = append(seen, seenError{info.Attempt, info.CorrectionsUsed, info.Decision.Action.String(), info.Decision.Reason.String()})
			if info.Decision.Fallback != fallback {
				t.Errorf("OnError saw a decision with Fallback=%v", info.Decision.Fallback)
			}
			if len(verdicts) == 0 {
				t.Fatal("the OnError hook was called more often than the case allows")
			}
			v := verdicts[0]
			verdicts = verdicts[1:]
			switch v {
			case "default":
				return TierDefault
			case "retry":
				return TierRetry
			case "fail":
				return TierFail
			}
			t.Fatalf("unknown OnError verdict %q", v)
			return TierDefault
		}
	}
	ctx := context.Background()
	if tc.Options.Deadline != "" {
		limit, err := time.ParseDuration(tc.Options.Deadline)
		if err != nil {
			t.Fatalf("deadline: %v", err)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}

	_, err := Run(ctx, c, params, step, opts)
	// Closing sends the reports the client still holds for the daemon.
	if cerr := c.Close(); cerr != nil {
		t.Errorf("Close = %v", cerr)
	}
	if sd != nil {
		sd.check(t, want)
	}

	if !reflect.DeepEqual(nonNil(dispatches), nonNil(want.Dispatches)) {
		t.Errorf("dispatches %v, want %v", dispatches, want.Dispatches)
	}
	if want.WaitsMs != nil && !reflect.DeepEqual(nonNil(waits), nonNil(*want.WaitsMs)) {
		t.Errorf("waits %v ms, want %v ms", waits, *want.WaitsMs)
	}
	if want.OnErrorSeen != nil && !reflect.DeepEqual(nonNil(seen), nonNil(*want.OnErrorSeen)) {
		t.Errorf("OnError saw %+v, want %+v", seen, *want.OnErrorSeen)
	}
	rec.mu.Lock()
	sent := rec.reqs
	rec.mu.Unlock()
	if want.Requests != nil {
		if len(sent) != len(want.Requests) {
			t.Errorf("%d DecideRetry requests sent, want %d", len(sent), len(want.Requests))
		}
		for i := range min(len(sent), len(want.Requests)) {
			t.Run(fmt.Sprintf("request %d", i+1), func(t *testing.T) { checkExpect(t, want.Requests[i], sent[i]) })
		}
	}
	// Every decision came from where the mode says; with an upstream, Admit
	// and ReportOutcome failing open count too.
	if wantFallbacks := int64(0); fallback {
		wantFallbacks = int64(len(sent))
		// A scripted server answers Admit and ReportOutcome itself.
		if tc.Options.Upstream != "" && sd == nil {
			wantFallbacks += int64(len(dispatches)) + 1 // an Admit per dispatch, a report of the success
		}
		if got := c.FallbackCount(); got != wantFallbacks {
			t.Errorf("FallbackCount = %d, want %d", got, wantFallbacks)
		}
	} else if got := c.FallbackCount(); got != 0 {
		t.Errorf("FallbackCount = %d without the fallback", got)
	}

	switch o := want.Outcome; {
	case o.OK:
		if err != nil {
			t.Errorf("Run = %v, want success", err)
		}
	case o.Failed != nil:
		var re *RunError
		if !errors.As(err, &re) {
			t.Fatalf("Run = %v, want a *RunError", err)
		}
		if re.Cause != nil {
			t.Errorf("RunError.Cause = %v; want the policy's FAIL", re.Cause)
		}
		if got := re.Decision.Action.String(); got != o.Failed.Action {
			t.Errorf("final action %s, want %s", got, o.Failed.Action)
		}
		if got := re.Decision.Reason.String(); got != o.Failed.Reason {
			t.Errorf("final reason %s, want %s", got, o.Failed.Reason)
		}
		if re.Calls != o.Failed.Calls {
			t.Errorf("RunError.Calls = %d, want %d", re.Calls, o.Failed.Calls)
		}
		// An Admit refusal is the daemon's answer even when DecideRetry is
		// answered locally.
		wantFallback := fallback && !(sd != nil && admissionReasons[re.Decision.Reason])
		if re.Decision.Fallback != wantFallback {
			t.Errorf("final decision Fallback=%v, want %v", re.Decision.Fallback, wantFallback)
		}
		// A step refused before its first call has no error of its own.
		if o.Failed.Calls == 0 && re.Err != nil {
			t.Errorf("RunError.Err = %v for a step never called", re.Err)
		} else if o.Failed.Calls > 0 && (re.Err == nil || !errors.Is(err, re.Err)) {
			t.Errorf("RunError does not carry the step's last error: %v", err)
		}
	case o.Error != nil:
		var re *RunError
		if !errors.As(err, &re) || re.Cause == nil {
			t.Fatalf("Run = %v, want a *RunError with the client's error as its Cause", err)
		}
		if got := status.Code(re.Cause); got != mustCode(t, o.Error.Code) {
			t.Errorf("Run's cause has code %v, want %s: %v", got, o.Error.Code, re.Cause)
		}
	default:
		t.Fatal("the case states no outcome")
	}
}

// admissionReasons are the reasons of an Admit refusal.
var admissionReasons = map[squawkv1.Reason]bool{
	squawkv1.Reason_REASON_CIRCUIT_OPEN:          true,
	squawkv1.Reason_REASON_UPSTREAM_COOLING_DOWN: true,
	squawkv1.Reason_REASON_UPSTREAM_SATURATED:    true,
	squawkv1.Reason_REASON_IN_FLIGHT_CAP:         true,
}

// nonNil makes an empty list and a missing one compare equal.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// mustCode reads a gRPC status name such as "INVALID_ARGUMENT".
func mustCode(t *testing.T, name string) codes.Code {
	t.Helper()
	var code codes.Code
	if err := code.UnmarshalJSON([]byte(`"` + name + `"`)); err != nil {
		t.Fatalf("status name %q: %v", name, err)
	}
	return code
}

// vectorCriticality is a case's criticality option, the enum value's name
// as proto3 JSON writes it ("" = none named).
func vectorCriticality(t *testing.T, name string) squawkv1.Criticality {
	t.Helper()
	if name == "" {
		return squawkv1.Criticality_CRITICALITY_UNSPECIFIED
	}
	level, ok := squawkv1.Criticality_value[name]
	if !ok {
		t.Fatalf("unknown criticality %q", name)
	}
	return squawkv1.Criticality(level)
}
