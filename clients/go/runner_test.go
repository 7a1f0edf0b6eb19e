package squawk

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// sleepRecorder is the zero-sleep seam: it records each wait and returns at
// once (or ctx's error when ctx already ended).
type sleepRecorder struct{ waits []time.Duration }

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.waits = append(s.waits, d)
	return ctx.Err()
}

// failTimes is a step that fails with err n times, then returns params.
func failTimes[P any](n int, err error, calls *int) func(context.Context, P) (P, error) {
	return func(_ context.Context, p P) (P, error) {
		*calls++
		if *calls <= n {
			var zero P
			return zero, err
		}
		return p, nil
	}
}

func TestRunRetryThenSuccess(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_RETRY, squawkv1.Reason_REASON_TRANSIENT_STATUS, 250*time.Millisecond))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	var rec sleepRecorder
	calls := 0
	stepErr := &StepError{HTTPStatus: 503, Body: []byte("busy"), Headers: map[string]string{"X-Trace": "1"}}
	got, err := Run(context.Background(), c, "params", failTimes[string](2, stepErr, &calls), RunOptions[string]{
		MaxAttempts: new(5), Capability: "hotels", Sleep: rec.sleep,
	})
	if err != nil || got != "params" {
		t.Fatalf("Run = %q, %v", got, err)
	}
	if calls != 3 {
		t.Errorf("step called %d times, want 3", calls)
	}
	if want := []time.Duration{250 * time.Millisecond, 250 * time.Millisecond}; !slices.Equal(rec.waits, want) {
		t.Errorf("waits %v, want %v", rec.waits, want)
	}
	_, reqs := f.seen()
	if len(reqs) != 2 {
		t.Fatalf("%d decisions asked, want 2", len(reqs))
	}
	for i, req := range reqs {
		if req.GetAttempt() != int32(i+1) || req.GetHttpStatus() != 503 || req.GetMaxAttempts() != 5 ||
			req.GetCapability() != "hotels" || string(req.GetResponseBody()) != "busy" ||
			req.GetHeaders()["X-Trace"] != "1" || req.GetCorrectionAvailable() || req.GetTransportFailure() {
			t.Errorf("request %d: %v", i, req)
		}
	}
}

func TestRunPlainErrorIsTransportFailure(t *testing.T) {
	c := deadClient(t) // the local fallback decides
	var rec sleepRecorder
	calls := 0
	_, err := Run(context.Background(), c, 0, failTimes[int](100, errors.New("connection reset"), &calls), RunOptions[int]{Sleep: rec.sleep})
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *RunError", err)
	}
	if re.Decision.Reason != squawkv1.Reason_REASON_ATTEMPTS_EXHAUSTED || !re.Decision.Fallback || re.Calls != 3 {
		t.Errorf("got %+v", re)
	}
	if re.Decision.Classification.GetCode() != "TRANSPORT_FAILURE" {
		t.Errorf("classification %v", re.Decision.Classification)
	}
	if want := []time.Duration{DefaultBackoff.Delay(1), DefaultBackoff.Delay(2)}; !slices.Equal(rec.waits, want) {
		t.Errorf("waits %v, want %v", rec.waits, want)
	}
	if c.FallbackCount() != 3 {
		t.Errorf("FallbackCount = %d, want 3", c.FallbackCount())
	}
}

func TestRunCorrectCallsHook(t *testing.T) {
	f := startFake(t, func(_ context.Context, req *squawkv1.DecideRetryRequest) (*squawkv1.DecideRetryResponse, error) {
		if req.GetCorrectionAvailable() && req.GetValidationRetriesUsed() < 2 {
			return &squawkv1.DecideRetryResponse{Action: squawkv1.Action_ACTION_CORRECT, Reason: squawkv1.Reason_REASON_CORRECTION_ELIGIBLE, Delay: durationpb.New(0)}, nil
		}
		return &squawkv1.DecideRetryResponse{Action: squawkv1.Action_ACTION_FAIL, Reason: squawkv1.Reason_REASON_CORRECTION_BUDGET_EXHAUSTED}, nil
	})
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	type params struct{ City string }
	var hookSaw []params
	step := func(_ context.Context, p params) (string, error) {
		if p.City != "PAR" {
			return "", &StepError{HTTPStatus: 400, Body: []byte(`{"success": false, "error": {"message": "bad city"}}`)}
		}
		return "booked " + p.City, nil
	}
	got, err := Run(context.Background(), c, params{City: "Paris"}, step, RunOptions[params]{
		Correct: func(_ context.Context, p params, stepErr error, d Decision) (params, error) {
			if d.Action != squawkv1.Action_ACTION_CORRECT {
				t.Errorf("hook called on %v", d)
			}
			if se := (*StepError)(nil); !errors.As(stepErr, &se) || se.HTTPStatus != 400 {
				t.Errorf("hook got error %v, want the step's HTTP 400", stepErr)
			}
			hookSaw = append(hookSaw, p)
			if p.City == "Paris" {
				return params{City: "paris"}, nil // still wrong: a second correction
			}
			return params{City: "PAR"}, nil
		},
		Sleep: (&sleepRecorder{}).sleep,
	})
	if err != nil || got != "booked PAR" {
		t.Fatalf("Run = %q, %v", got, err)
	}
	if want := []params{{"Paris"}, {"paris"}}; !slices.Equal(hookSaw, want) {
		t.Errorf("hook saw %v, want %v", hookSaw, want)
	}
	_, reqs := f.seen()
	if len(reqs) != 2 {
		t.Fatalf("%d decisions asked, want 2", len(reqs))
	}
	for i, req := range reqs {
		// Corrections consume no attempt and are counted.
		if req.GetAttempt() != 1 || req.GetValidationRetriesUsed() != int32(i) || !req.GetCorrectionAvailable() {
			t.Errorf("request %d: %v", i, req)
		}
	}
}

func TestRunCorrectHookError(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_CORRECT, squawkv1.Reason_REASON_CORRECTION_ELIGIBLE, 0))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	hookErr := errors.New("analyzer down")
	calls := 0
	_, err := Run(context.Background(), c, 1, failTimes[int](10, &StepError{HTTPStatus: 422}, &calls), RunOptions[int]{
		Correct: func(context.Context, int, error, Decision) (int, error) { return 0, hookErr },
	})
	if !errors.Is(err, hookErr) {
		t.Fatalf("err = %v, want the hook's error", err)
	}
	var se *StepError
	if !errors.As(err, &se) || se.HTTPStatus != 422 {
		t.Errorf("err = %v does not carry the step's error", err)
	}
}

func TestRunFailReturnsDecision(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_FAIL, squawkv1.Reason_REASON_TERMINAL_STATUS, 0))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	calls := 0
	cause := errors.New("upstream said no")
	_, err := Run(context.Background(), c, 1, failTimes[int](10, &StepError{HTTPStatus: 401, Err: cause}, &calls), RunOptions[int]{})
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *RunError", err)
	}
	if re.Decision.Action != squawkv1.Action_ACTION_FAIL || re.Decision.Reason != squawkv1.Reason_REASON_TERMINAL_STATUS || re.Decision.Fallback {
		t.Errorf("decision %+v", re.Decision)
	}
	if calls != 1 || re.Calls != 1 {
		t.Errorf("step called %d times (RunError says %d), want 1", calls, re.Calls)
	}
	var se *StepError
	if !errors.As(err, &se) || se.HTTPStatus != 401 || !errors.Is(err, cause) {
		t.Errorf("err = %v does not wrap the step's error", err)
	}
}

func TestRunCancelDuringWaitAbortsAtOnce(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_RETRY, squawkv1.Reason_REASON_TRANSIENT_STATUS, time.Minute))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	step := func(context.Context, int) (int, error) {
		calls++
		time.AfterFunc(50*time.Millisecond, cancel) // cancel during the one-minute wait
		return 0, &StepError{HTTPStatus: 503}
	}
	start := time.Now()
	_, err := Run(ctx, c, 0, step, RunOptions[int]{}) // the real timer sleep
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Run returned after %v; the wait was not aborted", elapsed)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want one matching context.Canceled", err)
	}
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Reason != squawkv1.Reason_REASON_CANCELLED || re.Decision.Action != squawkv1.Action_ACTION_FAIL {
		t.Errorf("err = %#v, want a RunError with a CANCELLED FAIL", err)
	}
	if calls != 1 {
		t.Errorf("step called %d times after cancellation, want 1", calls)
	}
}

func TestRunCancelledStepIsNeverRetried(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_RETRY, squawkv1.Reason_REASON_TRANSIENT_STATUS, 0))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	step := func(context.Context, int) (int, error) {
		calls++
		cancel()
		return 0, &StepError{HTTPStatus: 503}
	}
	_, err := Run(ctx, c, 0, step, RunOptions[int]{
		Sleep:   (&sleepRecorder{}).sleep,
		OnError: func(ErrorInfo) Tier { return TierRetry },
	})
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Reason != squawkv1.Reason_REASON_CANCELLED {
		t.Fatalf("err = %v, want a CANCELLED RunError", err)
	}
	if calls != 1 {
		t.Errorf("step called %d times, want 1", calls)
	}
	if _, reqs := f.seen(); len(reqs) != 0 {
		t.Errorf("the daemon was asked %d times on an ended ctx", len(reqs))
	}
}

func TestRunOnErrorFailStopsARetry(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_RETRY, squawkv1.Reason_REASON_TRANSIENT_STATUS, time.Second))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	var rec sleepRecorder
	var infos []ErrorInfo
	calls := 0
	_, err := Run(context.Background(), c, 0, failTimes[int](10, &StepError{HTTPStatus: 503}, &calls), RunOptions[int]{
		Sleep: rec.sleep,
		OnError: func(info ErrorInfo) Tier {
			infos = append(infos, info)
			return TierFail
		},
	})
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Action != squawkv1.Action_ACTION_FAIL {
		t.Fatalf("err = %v, want a FAIL RunError", err)
	}
	if calls != 1 || len(rec.waits) != 0 {
		t.Errorf("step called %d times, waits %v; want 1 call and no wait", calls, rec.waits)
	}
	if len(infos) != 1 || infos[0].Attempt != 1 || infos[0].Decision.Action != squawkv1.Action_ACTION_RETRY {
		t.Errorf("OnError saw %+v", infos)
	}
}

func TestRunOnErrorRetryOverridesAFail(t *testing.T) {
	f := startFake(t, answer(squawkv1.Action_ACTION_FAIL, squawkv1.Reason_REASON_NO_CORRECTION_AVAILABLE, 0))
	c := newClient(t, f.addr, WithCallTimeout(5*time.Second))
	var rec sleepRecorder
	calls := 0
	_, err := Run(context.Background(), c, 0, failTimes[int](10, &StepError{HTTPStatus: 400}, &calls), RunOptions[int]{
		MaxAttempts: new(3),
		Sleep:       rec.sleep,
		OnError:     func(ErrorInfo) Tier { return TierRetry },
	})
	// Resent with the backoff, but never past the attempt budget.
	if calls != 3 {
		t.Errorf("step called %d times, want 3 (the budget)", calls)
	}
	if want := []time.Duration{DefaultBackoff.Delay(1), DefaultBackoff.Delay(2)}; !slices.Equal(rec.waits, want) {
		t.Errorf("waits %v, want %v", rec.waits, want)
	}
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Reason != squawkv1.Reason_REASON_NO_CORRECTION_AVAILABLE {
		t.Errorf("err = %v, want the daemon's last FAIL", err)
	}
}

func TestRunOnErrorRetryUsesRetryAfter(t *testing.T) {
	c := deadClient(t) // the fallback reads the Retry-After header
	var rec sleepRecorder
	calls := 0
	stepErr := &StepError{HTTPStatus: 400, Headers: map[string]string{"Retry-After": "7"}}
	_, err := Run(context.Background(), c, 0, failTimes[int](1, stepErr, &calls), RunOptions[int]{
		Sleep:   rec.sleep,
		OnError: func(ErrorInfo) Tier { return TierRetry },
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{7 * time.Second}; !slices.Equal(rec.waits, want) {
		t.Errorf("waits %v, want %v", rec.waits, want)
	}
}

func TestRunOnErrorRetryNeverPastExhaustion(t *testing.T) {
	c := deadClient(t)
	calls := 0
	_, err := Run(context.Background(), c, 0, failTimes[int](10, &StepError{HTTPStatus: 503}, &calls), RunOptions[int]{
		MaxAttempts: new(2),
		Sleep:       (&sleepRecorder{}).sleep,
		OnError:     func(ErrorInfo) Tier { return TierRetry },
	})
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Reason != squawkv1.Reason_REASON_ATTEMPTS_EXHAUSTED || calls != 2 {
		t.Errorf("err = %v after %d calls; want ATTEMPTS_EXHAUSTED after 2", err, calls)
	}
}

func TestRunDecideErrorStops(t *testing.T) {
	c := deadClient(t, WithFallbackDisabled())
	calls := 0
	_, err := Run(context.Background(), c, 0, failTimes[int](10, &StepError{HTTPStatus: 503}, &calls), RunOptions[int]{})
	var re *RunError
	if !errors.As(err, &re) || re.Cause == nil || calls != 1 {
		t.Errorf("err = %v after %d calls; want a RunError with the DecideRetry error as Cause", err, calls)
	}
}
