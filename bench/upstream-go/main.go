// Command upstream-go is the outcome benchmark's upstream: a loopback HTTP
// server with a true capacity of C calls/s (a token bucket of C per second
// and a burst of C x -burst seconds). A call over it is answered 429 with
// Retry-After: 1 and still costs the server -reject-cost of a success (it
// takes that many tokens, never below zero), as a real server spends work on
// the calls it turns away. With -headers every answer carries OpenAI-style
// rate-limit headers consistent with the bucket; with -error-rate that share
// of calls is answered 500 whatever the bucket holds.
//
// GET /call?step=ID with an X-Executor header is the upstream call; GET
// /capacity?c=N sets C (the burst follows); GET /counts answers the counts
// per 100 ms of wall time (Unix ms / 100) and executor as JSON rows
// [bucket, executor, attempts, successes, 429s, 5xx].
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

type key struct {
	bucket   int64
	executor string
}

type upstream struct {
	mu         sync.Mutex
	rate       float64 // C, calls/s
	burstS     float64 // the bucket holds rate x burstS tokens
	rejectCost float64
	errorRate  float64
	headers    bool
	tokens     float64
	last       time.Time
	rng        *rand.Rand
	counts     map[key]*[4]int64
}

func (u *upstream) capacity() float64 { return math.Max(1, u.rate*u.burstS) }

// take answers one call: its status, and the bucket after it.
func (u *upstream) take(executor string, now time.Time) (status int, tokens float64, rate float64, capacity float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	capacity = u.capacity()
	u.tokens = math.Min(capacity, u.tokens+now.Sub(u.last).Seconds()*u.rate)
	u.last = now
	switch {
	case u.errorRate > 0 && u.rng.Float64() < u.errorRate:
		status = http.StatusInternalServerError
	case u.tokens >= 1:
		u.tokens--
		status = http.StatusOK
	default:
		u.tokens = math.Max(0, u.tokens-u.rejectCost)
		status = http.StatusTooManyRequests
	}
	k := key{now.UnixMilli() / 100, executor}
	c := u.counts[k]
	if c == nil {
		c = new([4]int64)
		u.counts[k] = c
	}
	c[0]++
	switch status {
	case http.StatusOK:
		c[1]++
	case http.StatusTooManyRequests:
		c[2]++
	default:
		c[3]++
	}
	return status, u.tokens, u.rate, capacity
}

func (u *upstream) call(w http.ResponseWriter, r *http.Request) {
	status, tokens, rate, capacity := u.take(r.Header.Get("X-Executor"), time.Now())
	h := w.Header()
	if u.headers {
		// OpenAI's form: the window's limit, what is left, and the time until
		// the bucket is full again as a Go duration ("250ms", "1.2s").
		reset := time.Duration((capacity - tokens) / rate * float64(time.Second)).Round(time.Millisecond)
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(int(capacity)))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(int(math.Max(0, math.Floor(tokens)))))
		h.Set("X-Ratelimit-Reset-Requests", reset.String())
	}
	h.Set("Content-Type", "application/json")
	switch status {
	case http.StatusOK:
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"ok":true,"step":%q}`, r.URL.Query().Get("step"))
	case http.StatusTooManyRequests:
		h.Set("Retry-After", "1")
		w.WriteHeader(status)
		fmt.Fprint(w, `{"error":{"type":"rate_limit_exceeded","message":"Rate limit reached, try again in 1s"}}`)
	default:
		w.WriteHeader(status)
		fmt.Fprint(w, `{"error":{"type":"server_error","message":"The server had an error"}}`)
	}
}

func (u *upstream) setCapacity(w http.ResponseWriter, r *http.Request) {
	c, err := strconv.ParseFloat(r.URL.Query().Get("c"), 64)
	if err != nil || !(c > 0) || c > 1e6 {
		http.Error(w, "c: a capacity in calls/s in (0, 1e6]", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.rate = c
	u.tokens = math.Min(u.tokens, u.capacity())
	u.mu.Unlock()
	fmt.Fprintln(w, "ok")
}

func (u *upstream) serveCounts(w http.ResponseWriter, _ *http.Request) {
	u.mu.Lock()
	rows := make([][]any, 0, len(u.counts))
	for k, c := range u.counts {
		rows = append(rows, []any{k.bucket, k.executor, c[0], c[1], c[2], c[3]})
	}
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(map[string]any{"bucket_ms": 100, "rows": rows}); err != nil {
		log.Print(err)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	rate := flag.Float64("capacity", 20, "C: the calls/s the upstream serves")
	burst := flag.Float64("burst", 0.5, "the bucket holds C x this many seconds of calls")
	rejectCost := flag.Float64("reject-cost", 0.05, "tokens a rejected call costs (a success costs 1)")
	errorRate := flag.Float64("error-rate", 0, "share of calls answered 500")
	headers := flag.Bool("headers", false, "send x-ratelimit-*-requests headers on every answer")
	seed := flag.Uint64("seed", 1, "seed of the 500s")
	flag.Parse()
	if !(*rate > 0) || !(*burst > 0) || *rejectCost < 0 || *errorRate < 0 || *errorRate > 1 {
		log.Fatal("-capacity and -burst must be > 0, -reject-cost >= 0, -error-rate in [0, 1]")
	}
	u := &upstream{
		rate: *rate, burstS: *burst, rejectCost: *rejectCost, errorRate: *errorRate, headers: *headers,
		last: time.Now(), rng: rand.New(rand.NewPCG(*seed, 23)), counts: map[key]*[4]int64{},
	}
	u.tokens = u.capacity()
	mux := http.NewServeMux()
	mux.HandleFunc("/call", u.call)
	mux.HandleFunc("/capacity", u.setCapacity)
	mux.HandleFunc("/counts", u.serveCounts)
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
