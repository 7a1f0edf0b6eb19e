// Command loadgen drives one gRPC method of one target, in a closed loop
// (fixed concurrency, to find saturation) or an open loop (fixed rate, to
// read latency under a known load), and prints the result.
//
// A payload is a file of request bytes sent as they are (see internal/raw),
// so loadgen needs no generated code and spends its CPU on gRPC alone.
// -payload may be repeated: call n sends payload n mod their number, so a
// row can spread its calls over several keys of a server's state.
// -payloads names one file holding many requests, each prefixed with its
// length (4 bytes, big-endian): a corpus of thousands of distinct requests
// needs no file, and no argument, per request.
//
// Stdout protocol, for bench/run.py, which reads the server's CPU time and
// peak RSS from /proc at the two marks:
//
//	measure-start
//	measure-end
//	{"calls": ..., "calls_per_s": ..., "p50_ms": ..., ...}
//
// "calls" and the latencies cover the window; "answered" counts every call
// answered OK, warm-up included.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/squawk-dev/squawk/bench/internal/raw"
	squawk "github.com/squawk-dev/squawk/clients/go"
)

type config struct {
	target      string
	method      string
	payloads    payloadFiles
	corpus      string
	mode        string
	concurrency int
	conns       int
	rate        float64
	warmup      time.Duration
	duration    time.Duration
	timeout     time.Duration
	maxInflight int
	throttle    bool
	rest        bool
}

type result struct {
	Mode        string            `json:"mode"`
	Rate        float64           `json:"rate,omitempty"`
	Concurrency int               `json:"concurrency,omitempty"`
	Conns       int               `json:"conns"`
	WindowS     float64           `json:"window_s"`
	Calls       uint64            `json:"calls"`
	Errors      int64             `json:"errors"`
	Codes       map[string]int    `json:"codes"`
	Messages    map[string]string `json:"messages"`
	Missed      int64             `json:"missed"`
	Answered    int64             `json:"answered"`
	CallsPerS   float64           `json:"calls_per_s"`
	P50Ms       float64           `json:"p50_ms"`
	P90Ms       float64           `json:"p90_ms"`
	P99Ms       float64           `json:"p99_ms"`
	P999Ms      float64           `json:"p999_ms"`
	MaxMs       float64           `json:"max_ms"`
}

// payloadFiles is the repeatable -payload flag.
type payloadFiles []string

func (p *payloadFiles) String() string { return strings.Join(*p, ",") }

func (p *payloadFiles) Set(path string) error {
	*p = append(*p, path)
	return nil
}

// marker prints the measurement marks the moment they happen.
type marker struct{ mu sync.Mutex }

func (m *marker) say(line string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(os.Stdout, line)
}

func (m *marker) begin() time.Time {
	m.say("measure-start")
	return time.Now()
}

func (m *marker) end(start time.Time) time.Duration {
	elapsed := time.Since(start)
	m.say("measure-end")
	return elapsed
}

func parseFlags() (config, error) {
	var cfg config
	flag.StringVar(&cfg.target, "target", "", "host:port of the server (required)")
	flag.StringVar(&cfg.method, "method", "", "full method, e.g. /squawk.v1.PolicyService/DecideRetry (required)")
	flag.Var(&cfg.payloads, "payload", "file holding a serialized request (repeat to send several in turn)")
	flag.StringVar(&cfg.corpus, "payloads", "", "file of serialized requests, each after its 4-byte big-endian length, sent after any -payload in turn")
	flag.StringVar(&cfg.mode, "mode", "closed", "closed (fixed concurrency) or open (fixed rate)")
	flag.IntVar(&cfg.concurrency, "concurrency", 32, "calls in flight, closed loop")
	flag.IntVar(&cfg.conns, "conns", 2, "HTTP/2 connections, calls spread round robin")
	flag.Float64Var(&cfg.rate, "rate", 1000, "calls per second, open loop")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "load before measuring")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "measurement window")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "deadline of each call")
	flag.IntVar(&cfg.maxInflight, "max-inflight", 2048, "cap on calls in flight, open loop")
	flag.BoolVar(&cfg.throttle, "throttle", false, "pass each call through the Go client's client-side throttle")
	flag.BoolVar(&cfg.rest, "rest", false, "closed loop: after a call not decided, wait out the rest of its deadline before the next")
	flag.Parse()
	switch {
	case cfg.target == "" || cfg.method == "" || (len(cfg.payloads) == 0 && cfg.corpus == ""):
		return cfg, errors.New("-target, -method and -payload or -payloads are required")
	case cfg.mode != "closed" && cfg.mode != "open":
		return cfg, fmt.Errorf("-mode %q: want closed or open", cfg.mode)
	case cfg.concurrency < 1 || cfg.conns < 1 || cfg.maxInflight < 1:
		return cfg, errors.New("-concurrency, -conns and -max-inflight must be >= 1")
	case cfg.rate <= 0:
		return cfg, errors.New("-rate must be > 0")
	case cfg.duration <= 0 || cfg.duration > time.Hour || cfg.warmup < 0 || cfg.warmup > time.Hour:
		return cfg, errors.New("-duration must be in (0, 1h] and -warmup in [0, 1h]")
	}
	return cfg, nil
}

// dial opens cfg.conns connections and waits until each is ready, so
// connection set-up never lands in the warm-up or the window.
func dial(cfg config) ([]*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conns := make([]*grpc.ClientConn, 0, cfg.conns)
	for range cfg.conns {
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(raw.Codec{})),
		}
		if cfg.throttle {
			// The clients' own rule, from the Go client: one throttle per
			// connection, as each executor's client has its own.
			opts = append(opts, grpc.WithChainUnaryInterceptor(squawk.ThrottleInterceptor()))
		}
		conn, err := grpc.NewClient(cfg.target, opts...)
		if err != nil {
			return conns, err
		}
		conns = append(conns, conn)
		conn.Connect()
		for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
			if !conn.WaitForStateChange(ctx, state) {
				return conns, fmt.Errorf("%s: not ready after 10s (last state %s)", cfg.target, state)
			}
		}
	}
	return conns, nil
}

func run() error {
	cfg, err := parseFlags()
	if err != nil {
		return err
	}
	payloads := make([][]byte, 0, len(cfg.payloads))
	for _, path := range cfg.payloads {
		payload, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		payloads = append(payloads, payload)
	}
	if cfg.corpus != "" {
		framed, err := os.ReadFile(cfg.corpus)
		if err != nil {
			return err
		}
		if payloads, err = appendFramed(payloads, framed); err != nil {
			return fmt.Errorf("%s: %w", cfg.corpus, err)
		}
	}
	conns, err := dial(cfg)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	if err != nil {
		return err
	}
	c := &caller{conns: conns, method: cfg.method, payloads: payloads, timeout: cfg.timeout, rest: cfg.rest}
	marks := &marker{}
	var t *tally
	var elapsed time.Duration
	out := result{Mode: cfg.mode, Conns: cfg.conns}
	if cfg.mode == "closed" {
		out.Concurrency = cfg.concurrency
		t, elapsed = closedLoop(c, cfg, marks)
	} else {
		out.Rate = cfg.rate
		t, elapsed = openLoop(c, cfg, marks)
	}
	out.WindowS = elapsed.Seconds()
	out.Calls = t.hist.total.Load()
	out.Errors = t.errors.Load()
	out.Codes = t.codes
	out.Messages = t.messages
	out.Missed = t.missed.Load()
	out.Answered = t.answered.Load()
	out.CallsPerS = float64(out.Calls) / elapsed.Seconds()
	out.P50Ms = t.hist.quantile(0.50)
	out.P90Ms = t.hist.quantile(0.90)
	out.P99Ms = t.hist.quantile(0.99)
	out.P999Ms = t.hist.quantile(0.999)
	out.MaxMs = float64(t.hist.max.Load()) / 1e6
	return json.NewEncoder(os.Stdout).Encode(out)
}

// appendFramed appends each request of a -payloads file to payloads.
func appendFramed(payloads [][]byte, framed []byte) ([][]byte, error) {
	for len(framed) > 0 {
		if len(framed) < 4 {
			return payloads, errors.New("truncated length prefix")
		}
		size := binary.BigEndian.Uint32(framed)
		framed = framed[4:]
		if uint64(size) > uint64(len(framed)) {
			return payloads, fmt.Errorf("a request of %d bytes, %d left", size, len(framed))
		}
		payloads = append(payloads, framed[:size:size])
		framed = framed[size:]
	}
	if len(payloads) == 0 {
		return payloads, errors.New("no request")
	}
	return payloads, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}
