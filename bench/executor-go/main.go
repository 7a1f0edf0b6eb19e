// Command executor-go is one executor of the outcome benchmark
// (bench/outcome): Poisson arrivals of steps at the rates of its phases, each
// step one distinct GET to the upstream, run through squawk.Run (modes
// "stateless" and "pod") or a tenacity-style loop (mode "none"). It writes
// what each step did as JSON when its last step ends.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	squawk "github.com/squawk-dev/squawk/clients/go"
	"github.com/squawk-dev/squawk/clients/go/squawkv1"
	"google.golang.org/grpc"
)

// Config is the executor's JSON argument, the same for the three languages.
type Config struct {
	ID          string       `json:"id"`
	URL         string       `json:"url"`
	Daemon      string       `json:"daemon"`
	Mode        string       `json:"mode"`
	Upstream    string       `json:"upstream"`
	DeadlineS   float64      `json:"deadline_s"`
	MaxAttempts int          `json:"max_attempts"`
	Phases      [][3]float64 `json:"phases"` // [start s, end s, steps/s] from the start
	Ready       string       `json:"ready"`  // written once the executor is ready
	Start       string       `json:"start"`  // holds the wall time the phases start at, once written
	Seed        uint64       `json:"seed"`
	Out         string       `json:"out"`
	// The tenant variants' fairness key and weight ("" and 0: none), and
	// the critical stream's criticality (a squawkv1.Criticality name
	// without its prefix; "": none).
	FairnessKey    string  `json:"fairness_key"`
	FairnessWeight float64 `json:"fairness_weight"`
	Criticality    string  `json:"criticality"`
}

type recorder struct {
	mu    sync.Mutex
	steps [][]any
	calls map[int64]*[2]int64 // wall second -> [Squawk calls, not decided]
}

func (r *recorder) step(start, end time.Time, ok bool, reason string, attempts int, undecided bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, []any{wall(start), wall(end), ok, reason, attempts, undecided})
}

// stepKey carries, in a step's context, whether any of its Squawk calls
// went undecided.
type stepKey struct{}

func (r *recorder) call(failed bool) {
	s := time.Now().Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[s]
	if c == nil {
		c = new([2]int64)
		r.calls[s] = c
	}
	c[0]++
	if failed {
		c[1]++
	}
}

func wall(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

func main() {
	flag.Parse()
	var cfg Config
	if err := json.Unmarshal([]byte(flag.Arg(0)), &cfg); err != nil {
		log.Fatalf("the config (one JSON argument): %v", err)
	}
	rec := &recorder{calls: map[int64]*[2]int64{}}
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}}
	var client *squawk.Client
	if cfg.Mode != "none" {
		// Every Squawk call passes here: an error is a call the daemon did
		// not decide in time (the client then fell back or failed open).
		count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			rec.call(err != nil)
			if flag, ok := ctx.Value(stepKey{}).(*atomic.Bool); ok && err != nil {
				flag.Store(true)
			}
			return err
		}
		var err error
		client, err = squawk.New(cfg.Daemon, squawk.WithDialOptions(grpc.WithUnaryInterceptor(count)))
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	var wg sync.WaitGroup
	var n atomic.Int64
	t0 := started(&cfg)
	for _, ph := range cfg.Phases {
		start, end, rate := t0+ph[0], t0+ph[1], ph[2]
		if rate <= 0 {
			continue
		}
		for t := start + rng.ExpFloat64()/rate; t < end; t += rng.ExpFloat64() / rate {
			if d := time.Until(time.UnixMicro(int64(t * 1e6))); d > 0 {
				time.Sleep(d)
			}
			k := n.Add(1)
			id := fmt.Sprintf("%s-%d", cfg.ID, k)
			wg.Add(1)
			go func() {
				defer wg.Done()
				runOne(&cfg, httpc, client, rec, id, rand.New(rand.NewPCG(cfg.Seed, uint64(k))))
			}()
		}
	}
	wg.Wait()
	out := map[string]any{"id": cfg.ID, "steps": rec.steps, "calls": rec.calls}
	data, err := json.Marshal(out)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(cfg.Out, data, 0o644); err != nil {
		log.Fatal(err)
	}
}

// started says ready, then waits for the wall time the first phase starts at.
func started(cfg *Config) float64 {
	if err := os.WriteFile(cfg.Ready, []byte("ready\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	for {
		if data, err := os.ReadFile(cfg.Start); err == nil {
			if t0, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64); err == nil {
				return t0
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reply is a success's response headers: Run reports their rate-limit
// headers with the success (squawk.RateLimitHeaderer), so the pacer reads
// the upstream's quota, as the Python executor's headers_of does.
type reply map[string]string

func (r reply) RateLimitHeaders() map[string]string { return r }

// call is one attempt: the response's headers on 200, else a
// *squawk.StepError.
func call(ctx context.Context, cfg *Config, httpc *http.Client, id string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+"?step="+id, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Executor", cfg.ID)
	resp, err := httpc.Do(req)
	if err != nil {
		return nil, &squawk.StepError{TransportFailure: true, Err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	headers := map[string]string{}
	for k, v := range resp.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	if resp.StatusCode == http.StatusOK {
		return headers, nil
	}
	return nil, &squawk.StepError{HTTPStatus: resp.StatusCode, Body: body, Headers: headers}
}

func runOne(cfg *Config, httpc *http.Client, client *squawk.Client, rec *recorder, id string, rng *rand.Rand) {
	start := time.Now()
	deadline := time.Duration(cfg.DeadlineS * float64(time.Second))
	undecided := new(atomic.Bool)
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), stepKey{}, undecided), deadline)
	defer cancel()
	attempts := 0
	step := func(ctx context.Context, id string) (reply, error) {
		attempts++
		return call(ctx, cfg, httpc, id)
	}
	if cfg.Mode == "none" {
		ok, reason := tenacity(ctx, cfg, rng, func() error { _, err := step(ctx, id); return err }, start, deadline)
		rec.step(start, time.Now(), ok, reason, attempts, false)
		return
	}
	opts := squawk.RunOptions[string]{MaxAttempts: &cfg.MaxAttempts}
	if cfg.Mode == "pod" {
		opts.Upstream = cfg.Upstream
	}
	opts.FairnessKey, opts.FairnessWeight = cfg.FairnessKey, cfg.FairnessWeight
	if cfg.Criticality != "" {
		opts.Criticality = squawkv1.Criticality(squawkv1.Criticality_value["CRITICALITY_"+cfg.Criticality])
	}
	_, err := squawk.Run(ctx, client, id, step, opts)
	reason := ""
	if err != nil {
		reason = "ERROR"
		var runErr *squawk.RunError
		if errors.As(err, &runErr) && runErr.Decision.Reason != 0 {
			reason = strings.TrimPrefix(runErr.Decision.Reason.String(), "REASON_")
		} else if errors.Is(err, context.DeadlineExceeded) {
			reason = "DEADLINE_EXCEEDED"
		}
	}
	rec.step(start, time.Now(), err == nil, reason, attempts, undecided.Load())
}

// tenacity is the loop a team writes without Squawk: full-jitter exponential
// backoff (0.5 s doubling, capped at 10 s: the default profile's bounds), the
// Retry-After when the answer has one, the same attempt budget and deadline.
func tenacity(ctx context.Context, cfg *Config, rng *rand.Rand, attempt func() error, start time.Time, deadline time.Duration) (bool, string) {
	for n := 1; ; n++ {
		err := attempt()
		if err == nil {
			return true, ""
		}
		if n >= cfg.MaxAttempts {
			return false, "ATTEMPTS_EXHAUSTED"
		}
		wait := time.Duration(rng.Float64() * float64(min(10*time.Second, (500*time.Millisecond)<<(n-1))))
		var se *squawk.StepError
		if errors.As(err, &se) {
			if s, perr := strconv.ParseFloat(se.Headers["retry-after"], 64); perr == nil && s >= 0 {
				wait = time.Duration(s * float64(time.Second))
			}
		}
		if time.Since(start)+wait > deadline {
			return false, "DEADLINE_EXCEEDED"
		}
		select {
		case <-ctx.Done():
			return false, "DEADLINE_EXCEEDED"
		case <-time.After(wait):
		}
	}
}
