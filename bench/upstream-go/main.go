// Command upstream-go is the outcome benchmark's upstream: a loopback HTTP
// server with a true capacity of C calls/s (a token bucket of C per second
// and a burst of C x -burst seconds). A call over it is answered 429 with
// Retry-After: 1 and still costs the server -reject-cost of a success (it
// takes that many tokens, never below zero), as a real server spends work on
// the calls it turns away. With -error-rate that share of calls is answered
// 500 whatever the bucket holds.
//
// -dialect gives it a provider's personality: its true limit and the
// rate-limit headers it sends on every answer (200 and 429), each in the form
// its provider documents (see dialects). A storm (GET /storm?p=X) answers
// that share of calls 529 with Anthropic's overloaded_error body, no
// rate-limit headers and no Retry-After, whatever the bucket holds. Its
// 529s fall on each step's n-th attempt by a hash of (-seed, step, n), not
// by the order calls arrive in: every mode of a run meets the same 529s on
// the same steps' attempts, so the modes differ by their policy alone (the
// attempts they spend, the deadline, when they retry), not by their luck.
//
// GET /call?step=ID with an X-Executor header is the upstream call; POST
// /v1/chat/completions and /v1/messages are the same call in the shapes of
// OpenAI's and Anthropic's APIs, for their SDKs. GET /capacity?c=N sets C
// (the bucket follows); GET /counts answers the counts per 100 ms of wall
// time (Unix ms / 100) and executor as JSON rows [bucket, executor,
// attempts, successes, 429s, 5xx] (529s count as 5xx); GET /tokens the calls
// its bucket holds now.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// StatusOverloaded is Anthropic's "overloaded_error" status.
const StatusOverloaded = 529

// dialect is a provider's personality: how many seconds of C its bucket
// holds (0: -burst), whether it starts nearly spent, and the headers.
type dialect struct {
	windowS float64
	// Starts with only C x -burst tokens: a per-minute quota mostly used
	// before the run began, so the run sees it spent and refilling, not a
	// minute's worth of calls served at once.
	spent   bool
	fixed   bool // a fixed window that starts over every windowS (IETF), not a bucket
	headers func(w http.Header, s snapshot, now time.Time, rng *rand.Rand)
}

// snapshot is the limit after a call: its size, what is left, C, and for a
// fixed window its end.
type snapshot struct {
	size, tokens, rate float64
	windowEnd          time.Time
}

// untilFull is how long the bucket takes to be full again.
func (s snapshot) untilFull() time.Duration {
	return time.Duration((s.size - s.tokens) / s.rate * float64(time.Second))
}

func remaining(s snapshot) string {
	return strconv.Itoa(int(math.Max(0, math.Floor(s.tokens))))
}

// openAI: "x-ratelimit-reset-requests: the time until the rate limit
// (based on requests) resets to its initial state", a Go duration ("1s",
// "6m0s"); the limit is the bucket's size.
func openAI(h http.Header, s snapshot, _ time.Time, _ *rand.Rand) {
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(int(s.size)))
	h.Set("X-Ratelimit-Remaining-Requests", remaining(s))
	h.Set("X-Ratelimit-Reset-Requests", s.untilFull().Round(time.Millisecond).String())
}

// anthropic: "anthropic-ratelimit-requests-reset: the time when the request
// rate limit will be fully replenished, provided in RFC 3339 format", which
// Anthropic sends at whole seconds (rounded up here: never before it is).
func anthropic(h http.Header, s snapshot, now time.Time, _ *rand.Rand) {
	full := now.Add(s.untilFull())
	if t := full.Truncate(time.Second); t.Before(full) {
		full = t.Add(time.Second)
	}
	h.Set("Anthropic-Ratelimit-Requests-Limit", strconv.Itoa(int(s.size)))
	h.Set("Anthropic-Ratelimit-Requests-Remaining", remaining(s))
	h.Set("Anthropic-Ratelimit-Requests-Reset", full.UTC().Format(time.RFC3339))
}

// ietf: draft-ietf-httpapi-ratelimit-headers (-07 on) structured fields: the
// policy's quota q over a window of w seconds, and the remaining r with t,
// the whole seconds until the quota resets (an Integer: rounded up).
func ietf(h http.Header, s snapshot, now time.Time, _ *rand.Rand) {
	t := math.Ceil(s.windowEnd.Sub(now).Seconds())
	h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=1`, int(s.size)))
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%s;t=%d`, remaining(s), int(t)))
}

// coarse: the GitHub-style names with a reset in delta seconds, counted in
// whole seconds until the next token (rounded up; 0 when the bucket is full).
func coarse(h http.Header, s snapshot, _ time.Time, _ *rand.Rand) {
	next := 0.0
	if s.tokens < s.size {
		next = math.Ceil((math.Floor(s.tokens) + 1 - s.tokens) / s.rate)
	}
	h.Set("X-Ratelimit-Limit", strconv.Itoa(int(s.size)))
	h.Set("X-Ratelimit-Remaining", remaining(s))
	h.Set("X-Ratelimit-Reset", strconv.Itoa(int(next)))
}

// lying: headers that say nothing of the true bucket: a huge quota on most
// answers, and on one in ten a single call left until a day from now.
func lying(h http.Header, _ snapshot, _ time.Time, rng *rand.Rand) {
	h.Set("X-Ratelimit-Limit", "1000000")
	if rng.Float64() < 0.1 {
		h.Set("X-Ratelimit-Remaining", "1")
		h.Set("X-Ratelimit-Reset", "86400")
		return
	}
	h.Set("X-Ratelimit-Remaining", "999999")
	h.Set("X-Ratelimit-Reset", "1")
}

var dialects = map[string]dialect{
	"":            {},
	"headers":     {headers: openAI}, // the -burst bucket, as before the dialects
	"openai-s":    {windowS: 1, headers: openAI},
	"openai-m":    {windowS: 60, spent: true, headers: openAI},
	"anthropic-s": {windowS: 1, headers: anthropic},
	"anthropic-m": {windowS: 60, spent: true, headers: anthropic},
	"ietf":        {windowS: 1, fixed: true, headers: ietf},
	"coarse":      {windowS: 1, headers: coarse},
	"lying":       {windowS: 1, headers: lying},
}

type key struct {
	bucket   int64
	executor string
}

type upstream struct {
	mu         sync.Mutex
	rate       float64 // C, calls/s
	burstS     float64 // the bucket holds rate x burstS tokens (unless the dialect says)
	rejectCost float64
	errorRate  float64
	storm      float64 // share of calls answered 529
	dialect    dialect
	tokens     float64
	windowEnd  time.Time // a fixed window's end
	last       time.Time
	rng        *rand.Rand
	seed       uint64
	attempts   map[string]uint64 // per step: the attempts seen
	counts     map[key]*[4]int64
}

// stormHits says whether the storm answers this attempt of `step` 529: the
// attempt's draw is a hash of (seed, step, attempt), the same in every
// mode of a run. A call with no step draws from the rng.
func (u *upstream) stormHits(step string) bool {
	if step == "" {
		return u.rng.Float64() < u.storm
	}
	n := u.attempts[step]
	u.attempts[step] = n + 1
	h := fnv.New64a()
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], u.seed)
	binary.LittleEndian.PutUint64(buf[8:], n)
	h.Write(buf[:])
	h.Write([]byte(step))
	return float64(mix(h.Sum64())>>11)/(1<<53) < u.storm
}

// mix is splitmix64's finalizer: FNV's last bytes barely reach its high
// bits, so steps that differ near their end would share their fates.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (u *upstream) size() float64 {
	if u.dialect.windowS > 0 {
		return math.Max(1, u.rate*u.dialect.windowS)
	}
	return math.Max(1, u.rate*u.burstS)
}

// refill brings the bucket (or the fixed window) to now.
func (u *upstream) refill(now time.Time) {
	size := u.size()
	if u.dialect.fixed {
		if !now.Before(u.windowEnd) {
			u.tokens = size
			u.windowEnd = now.Truncate(time.Duration(u.dialect.windowS * float64(time.Second))).
				Add(time.Duration(u.dialect.windowS * float64(time.Second)))
		}
	} else {
		u.tokens = math.Min(size, u.tokens+now.Sub(u.last).Seconds()*u.rate)
	}
	u.last = now
}

// take answers one call: its status, and the limit after it.
func (u *upstream) take(executor, step string, now time.Time) (status int, s snapshot) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.refill(now)
	switch {
	case u.storm > 0 && u.stormHits(step):
		status = StatusOverloaded
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
	return status, snapshot{u.size(), u.tokens, u.rate, u.windowEnd}
}

// Bodies per API: [200, 429, 500, 529]. The 529 is Anthropic's on every path:
// the storm is Anthropic's.
type bodies [4]string

const overloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`

var (
	plain = bodies{
		`{"ok":true}`,
		`{"error":{"type":"rate_limit_exceeded","message":"Rate limit reached, try again in 1s"}}`,
		`{"error":{"type":"server_error","message":"The server had an error"}}`,
		overloaded,
	}
	chat = bodies{
		`{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}`,
		`{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,` +
			`"code":"rate_limit_exceeded"}}`,
		`{"error":{"message":"The server had an error while processing your request.",` +
			`"type":"server_error","param":null,"code":null}}`,
		overloaded,
	}
	messages = bodies{
		`{"id":"msg_1","type":"message","role":"assistant","model":"m",` +
			`"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,` +
			`"usage":{"input_tokens":7,"output_tokens":5}}`,
		`{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has ` +
			`exceeded your rate limit"}}`,
		`{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
		overloaded,
	}
)

// stepInBody finds the step an SDK's request names in its prompt ("step ID").
var stepInBody = regexp.MustCompile(`step ([A-Za-z0-9_-]{1,64})`)

// stepOf is the step a call belongs to: ?step=ID, or the one its body names.
func stepOf(r *http.Request) string {
	if step := r.URL.Query().Get("step"); step != "" {
		return step
	}
	if r.Body == nil {
		return ""
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		return ""
	}
	if m := stepInBody.FindSubmatch(body); m != nil {
		return string(m[1])
	}
	return ""
}

func (u *upstream) handler(b bodies) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		step := stepOf(r)
		now := time.Now()
		status, s := u.take(r.Header.Get("X-Executor"), step, now)
		h := w.Header()
		if u.dialect.headers != nil && status != StatusOverloaded {
			u.mu.Lock() // the rng is not safe for concurrent use
			u.dialect.headers(h, s, now, u.rng)
			u.mu.Unlock()
		}
		h.Set("Content-Type", "application/json")
		body := b[0]
		switch status {
		case http.StatusTooManyRequests:
			h.Set("Retry-After", "1")
			body = b[1]
		case http.StatusInternalServerError:
			body = b[2]
		case StatusOverloaded:
			body = b[3]
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

func (u *upstream) setCapacity(w http.ResponseWriter, r *http.Request) {
	c, err := strconv.ParseFloat(r.URL.Query().Get("c"), 64)
	if err != nil || !(c > 0) || c > 1e6 {
		http.Error(w, "c: a capacity in calls/s in (0, 1e6]", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.refill(time.Now())
	u.rate = c
	u.tokens = math.Min(u.tokens, u.size())
	u.mu.Unlock()
	fmt.Fprintln(w, "ok")
}

func (u *upstream) setStorm(w http.ResponseWriter, r *http.Request) {
	p, err := strconv.ParseFloat(r.URL.Query().Get("p"), 64)
	if err != nil || !(p >= 0 && p <= 1) {
		http.Error(w, "p: the share of calls answered 529, in [0, 1]", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.storm = p
	u.mu.Unlock()
	fmt.Fprintln(w, "ok")
}

// serveTokens answers the calls the bucket (or the window) holds now: what
// the upstream can serve at once on top of its rate, which a phase's
// capacity counts (a minute's bucket stores what the calls before it left).
func (u *upstream) serveTokens(w http.ResponseWriter, _ *http.Request) {
	u.mu.Lock()
	u.refill(time.Now())
	tokens := u.tokens
	u.mu.Unlock()
	fmt.Fprintln(w, strconv.FormatFloat(tokens, 'f', 3, 64))
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
	storm := flag.Float64("storm", 0, "share of calls answered 529 from the start (GET /storm?p= sets it)")
	headers := flag.Bool("headers", false, "the same as -dialect headers")
	name := flag.String("dialect", "", "a provider's personality: headers, openai-s, openai-m, "+
		"anthropic-s, anthropic-m, ietf, coarse, lying (default: no rate-limit headers)")
	seed := flag.Uint64("seed", 1, "seed of the 500s, the 529s and the lies")
	flag.Parse()
	if *headers && *name == "" {
		*name = "headers"
	}
	d, ok := dialects[*name]
	if !ok {
		log.Fatalf("-dialect %q: not one of headers, openai-s, openai-m, anthropic-s, anthropic-m, "+
			"ietf, coarse, lying", *name)
	}
	if !(*rate > 0) || !(*burst > 0) || *rejectCost < 0 || *errorRate < 0 || *errorRate > 1 ||
		*storm < 0 || *storm > 1 {
		log.Fatal("-capacity and -burst must be > 0, -reject-cost >= 0, -error-rate and -storm in [0, 1]")
	}
	u := &upstream{
		rate: *rate, burstS: *burst, rejectCost: *rejectCost, errorRate: *errorRate, storm: *storm,
		dialect: d, last: time.Now(), rng: rand.New(rand.NewPCG(*seed, 23)), seed: *seed,
		attempts: map[string]uint64{}, counts: map[key]*[4]int64{},
	}
	u.refill(u.last)
	u.tokens = u.size()
	if d.spent {
		u.tokens = math.Min(u.tokens, *rate**burst)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/call", u.handler(plain))
	mux.HandleFunc("POST /v1/chat/completions", u.handler(chat))
	mux.HandleFunc("POST /v1/messages", u.handler(messages))
	mux.HandleFunc("/capacity", u.setCapacity)
	mux.HandleFunc("/storm", u.setStorm)
	mux.HandleFunc("/counts", u.serveCounts)
	mux.HandleFunc("/tokens", u.serveTokens)
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
