package squawk

import (
	"math"
	"time"
)

// Backoff is an exponential backoff with the policy's deterministic sine
// jitter: the same attempt always waits the same time, so a decision can be
// replayed exactly in any language.
type Backoff struct {
	// Initial is the wait after the first failed attempt, before jitter.
	Initial time.Duration
	// Max caps the wait, before and after jitter.
	Max time.Duration
	// Factor multiplies the wait after each further attempt.
	Factor float64
}

// Delay is the wait after failed attempt number attempt (1-based), in whole
// milliseconds:
//
//	base  = min(Initial × Factor^(attempt-1), Max)
//	delay = min(base × (1 + 0.1 × sin(attempt)), Max)
//
// rounded half to even, exactly like the daemon. An attempt below 1 counts
// as 1.
func (b Backoff) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	maxMS := msFloat(b.Max)
	// Cap the exponent like the daemon does; math.Pow overflows to +Inf,
	// which the min turns into Max.
	exponent := min(attempt-1, 1024)
	base := min(msFloat(b.Initial)*math.Pow(b.Factor, float64(exponent)), maxMS)
	ms := min(base*(1+sineJitter*math.Sin(float64(attempt))), maxMS)
	return time.Duration(math.RoundToEven(ms)) * time.Millisecond
}

func msFloat(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}
