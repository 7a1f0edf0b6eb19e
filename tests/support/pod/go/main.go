// A pod executor in Go: each worker goroutine runs steps through squawk.Run
// against the test's fake upstream, one real HTTP call per dispatch, and
// prints what happened as JSON lines (tests/e2e/test_pod.py reads them; the
// Python and Node executors print the same lines).
//
//	go run . '{"target": ..., "base": ..., "upstream": ..., ...}'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	squawk "github.com/squawk-dev/squawk/clients/go"
	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

type config struct {
	Target      string   `json:"target"`
	Base        string   `json:"base"`
	Path        string   `json:"path"`
	Upstream    string   `json:"upstream"`
	Profile     string   `json:"profile"`
	Workers     []string `json:"workers"`
	MaxSteps    int      `json:"max_steps"`
	MaxAttempts int      `json:"max_attempts"`
	TimeLimitS  float64  `json:"time_limit_s"`
}

var (
	printMu sync.Mutex
	out     = json.NewEncoder(os.Stdout)
)

func emit(worker, event string, fields map[string]any) {
	line := map[string]any{"w": worker, "ev": event}
	for k, v := range fields {
		line[k] = v
	}
	printMu.Lock()
	defer printMu.Unlock()
	_ = out.Encode(line)
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func get(ctx context.Context, url, worker string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("X-Pod-Worker", worker)
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func work(c *squawk.Client, cfg config, worker string) bool {
	ctx := context.Background()
	gate, _, err := get(ctx, cfg.Base+cfg.Path+"/gate", worker)
	if err != nil || gate.StatusCode != http.StatusOK {
		emit(worker, "error", map[string]any{"message": fmt.Sprintf("the gate failed: %v", err)})
		return false
	}
	retryPending := false
	step := func(ctx context.Context, _ struct{}) (bool, error) {
		resp, body, err := get(ctx, cfg.Base+cfg.Path, worker)
		if err != nil {
			return false, err // no HTTP answer: a transport failure
		}
		emit(worker, "dispatch", map[string]any{"status": resp.StatusCode})
		if resp.StatusCode >= 400 {
			headers := map[string]string{}
			for name := range resp.Header {
				headers[name] = resp.Header.Get(name)
			}
			return false, &squawk.StepError{HTTPStatus: resp.StatusCode, Body: body, Headers: headers}
		}
		return resp.Header.Get("X-Pod-Stop") == "1", nil
	}
	opts := squawk.RunOptions[struct{}]{
		Upstream:    cfg.Upstream,
		Capability:  worker,
		Profile:     cfg.Profile,
		MaxAttempts: new(cfg.MaxAttempts),
		OnError: func(info squawk.ErrorInfo) squawk.Tier {
			d := info.Decision
			retryPending = d.Action == squawkv1.Action_ACTION_RETRY
			emit(worker, "decision", map[string]any{
				"action": d.Action.String(), "reason": d.Reason.String(), "delay_ms": d.Delay.Milliseconds(),
			})
			return squawk.TierDefault
		},
		// The runner sleeps after a RETRY decision, or after a refused Admit.
		Sleep: func(ctx context.Context, d time.Duration) error {
			kind := "admission"
			if retryPending {
				kind = "retry"
			}
			retryPending = false
			emit(worker, "wait", map[string]any{"kind": kind, "ms": d.Milliseconds()})
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		},
	}
	ends := time.Now().Add(time.Duration(cfg.TimeLimitS * float64(time.Second)))
	for range cfg.MaxSteps {
		if time.Now().After(ends) {
			emit(worker, "error", map[string]any{"message": "time limit reached"})
			return false
		}
		stop, err := squawk.Run(ctx, c, struct{}{}, step, opts)
		var failed *squawk.RunError
		if errors.As(err, &failed) && failed.Cause == nil {
			d := failed.Decision
			emit(worker, "step", map[string]any{
				"ok": false, "action": d.Action.String(), "reason": d.Reason.String(), "calls": failed.Calls,
			})
			continue
		}
		if err != nil {
			emit(worker, "error", map[string]any{"message": err.Error()})
			return false
		}
		emit(worker, "step", map[string]any{"ok": true})
		if stop {
			break
		}
	}
	emit(worker, "done", nil)
	return true
}

func main() {
	var cfg config
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		os.Exit(2)
	}
	// A generous call timeout: the test counts what the daemon decided, so
	// no answer may come from the client's fallback on a busy machine.
	c, err := squawk.New(cfg.Target, squawk.WithCallTimeout(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	if _, err := c.GetUpstreams(context.Background(), &squawkv1.GetUpstreamsRequest{}); err != nil { // connect before the gate opens
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(2)
	}
	var wg sync.WaitGroup
	results := make([]bool, len(cfg.Workers))
	for i, w := range cfg.Workers {
		wg.Go(func() { results[i] = work(c, cfg, w) })
	}
	wg.Wait()
	emit("", "exit", map[string]any{"fallbacks": c.FallbackCount()})
	_ = c.Close()
	for _, ok := range results {
		if !ok {
			os.Exit(1)
		}
	}
}
