package squawk

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

type costOnly float64

func (c costOnly) Cost() float64 { return float64(c) }

type panicking struct{}

func (panicking) Cost() float64                       { panic("no usage") }
func (panicking) RateLimitHeaders() map[string]string { panic("no headers") }

type headersOnly map[string]string

func (h headersOnly) RateLimitHeaders() map[string]string { return h }

func TestRealCost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result any
		want   float64
	}{
		{"no Cost method: the estimate", "done", 7},
		{"a cost in bounds", costOnly(1234), 1234},
		{"zero is a cost", costOnly(0), 0},
		{"the bound itself", costOnly(1e9), 1e9},
		{"over the bound: the estimate", costOnly(1e9 + 1), 7},
		{"negative: the estimate", costOnly(-1), 7},
		{"NaN: the estimate", costOnly(math.NaN()), 7},
		{"infinite: the estimate", costOnly(math.Inf(1)), 7},
		{"a panic: the estimate", panicking{}, 7},
		{"a nil pointer whose method panics: the estimate", (*costPtr)(nil), 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := realCost(tc.result, 7); got != tc.want {
				t.Errorf("realCost = %v, want %v", got, tc.want)
			}
		})
	}
}

type costPtr struct{ n float64 }

func (c *costPtr) Cost() float64 { return c.n }

func TestPaceHeaders(t *testing.T) {
	long := "x-ratelimit-" + strings.Repeat("a", 256-len("x-ratelimit-"))
	for _, tc := range []struct {
		name   string
		result any
		want   map[string]string
	}{
		{"no RateLimitHeaders method: none", "done", nil},
		{"a panic: none", panicking{}, nil},
		{"only rate-limit names, in any case", headersOnly{
			"X-RateLimit-Remaining": "1", "x-rate-limit-reset": "2", "Retry-After": "3", "content-type": "text/plain"},
			map[string]string{"X-RateLimit-Remaining": "1", "x-rate-limit-reset": "2"}},
		{"a name of 256 characters is kept, 257 is not", headersOnly{long: "1", long + "b": "2"},
			map[string]string{long: "1"}},
		{"a value of 8,192 characters is kept, 8,193 is not", headersOnly{
			"x-ratelimit-a": strings.Repeat("é", 8192), "x-ratelimit-b": strings.Repeat("1", 8193)},
			map[string]string{"x-ratelimit-a": strings.Repeat("é", 8192)}},
		{"invalid UTF-8 is left out", headersOnly{"x-ratelimit-a": "\xff", "x-ratelimit-\xfe": "1", "x-ratelimit-c": "3"},
			map[string]string{"x-ratelimit-c": "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := paceHeaders(tc.result)
			if len(got) != len(tc.want) {
				t.Fatalf("paceHeaders = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("paceHeaders[%q] = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestPaceHeadersFlood(t *testing.T) {
	// A flood of rate-limit headers is cut to the daemon's 64.
	flood := headersOnly{}
	for i := range 5000 {
		flood[fmt.Sprintf("x-ratelimit-n%d", i)] = "1"
	}
	if got := paceHeaders(flood); len(got) != maxHeaders {
		t.Errorf("%d headers kept of a flood, want %d", len(got), maxHeaders)
	}
}
