package squawk

import (
	"math"
	"strings"
	"time"
)

// A spent quota's reset, as docs/fallback.md specifies it: on a 429 without
// a wait hint, the fallback waits until the last quota the server says is
// spent (remaining 0) resets. The families and their order are the policy
// core's (squawk.policy.ratelimit.spent_quota_wait).

// Magnitudes that tell x-ratelimit-reset's forms apart: below epochSeconds
// it is delta seconds, below epochMillis epoch seconds, else epoch ms.
const (
	epochSeconds   = 1e9
	epochMillis    = 1e11
	maxScalarChars = 64
	maxListChars   = 512
	maxListMembers = 16
)

type quotaReset struct {
	spent  bool
	reset  float64 // seconds from now
	known  bool    // whether the reset was read
	header string
}

// spentQuotaWait is the wait until the last spent quota resets, clamped to
// [0, maxRetryAfter], and the header that gives it; ok is false when no
// quota is at remaining 0 with a readable reset.
func spentQuotaWait(headers map[string]string, now time.Time) (time.Duration, string, bool) {
	var wait time.Duration
	from, found := "", false
	for _, q := range quotaResets(headers, now) {
		if !q.spent || !q.known || math.IsNaN(q.reset) {
			continue
		}
		d := clampReset(q.reset)
		if !found || d > wait {
			wait, from, found = d, q.header, true
		}
	}
	return wait, from, found
}

func clampReset(seconds float64) time.Duration {
	seconds = min(max(seconds, 0), float64(maxRetryAfter)/float64(time.Second))
	return time.Duration(math.RoundToEven(seconds*1e6)) * time.Microsecond
}

// quotaResets lists every quota's state, family by family.
func quotaResets(headers map[string]string, now time.Time) []quotaReset {
	get := func(name string) (string, bool) { return header(headers, name) }
	spent := func(name string) bool {
		v, ok := get(name)
		return ok && zeroCount(v)
	}
	var out []quotaReset
	add := func(isSpent bool, reset float64, known bool, name string) {
		out = append(out, quotaReset{isSpent, reset, known, name})
	}
	for _, kind := range []string{"requests", "tokens"} {
		name := "x-ratelimit-reset-" + kind
		v, ok := get(name)
		reset, known := 0.0, false
		if ok {
			reset, known = goDuration(v)
		}
		add(spent("x-ratelimit-remaining-"+kind), reset, known, name)
	}
	for _, kind := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		prefix := "anthropic-ratelimit-" + kind
		v, ok := get(prefix + "-reset")
		reset, known := 0.0, false
		if ok {
			reset, known = rfc3339From(v, now)
		}
		add(spent(prefix+"-remaining"), reset, known, prefix+"-reset")
	}
	if v, ok := get("ratelimit"); ok {
		for _, params := range sfMembers(v) {
			r, rok := sfInteger(params["r"])
			t, tok := sfInteger(params["t"])
			add(rok && r == 0, t, tok, "RateLimit")
		}
	}
	{
		v, ok := get("ratelimit-reset")
		reset, known := 0.0, false
		if ok {
			reset, known = scalarDecimal(v)
		}
		add(spent("ratelimit-remaining"), reset, known, "RateLimit-Reset")
	}
	for _, prefix := range []string{"x-ratelimit", "x-rate-limit"} {
		isSpent := spent(prefix + "-remaining")
		if v, ok := get(prefix + "-reset-after"); ok {
			if after, ok := scalarDecimal(v); ok {
				add(isSpent, after, true, prefix+"-reset-after")
				continue
			}
		}
		v, ok := get(prefix + "-reset")
		reset, known := 0.0, false
		if ok {
			reset, known = epochOrDelta(v, now)
		}
		add(isSpent, reset, known, prefix+"-reset")
	}
	return out
}

// scalarDecimal reads a plain non-negative decimal of at most 64
// characters; spaces and tabs around it are ignored.
func scalarDecimal(value string) (float64, bool) {
	if len(value) > maxScalarChars {
		return 0, false
	}
	return plainDecimal(trimOWS(value))
}

// zeroCount reports whether a remaining count reads as zero ("0", "0.0").
func zeroCount(value string) bool {
	n, ok := scalarDecimal(value)
	return ok && n == 0
}

// goDurationUnits are time.ParseDuration's units, in seconds.
var goDurationUnits = map[string]float64{
	"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ns": 1e-9,
}

// goDuration reads OpenAI's reset: a Go duration without a sign ("1s",
// "6m0s", "1h2m3.5s", "20ms"), or a bare decimal read as seconds.
func goDuration(value string) (float64, bool) {
	if len(value) > maxScalarChars {
		return 0, false
	}
	value = trimOWS(value)
	if n, ok := plainDecimal(value); ok {
		return n, true
	}
	if value == "" {
		return 0, false
	}
	isNumber := func(c byte) bool { return c == '.' || (c >= '0' && c <= '9') }
	total := 0.0
	for i := 0; i < len(value); {
		start := i
		for i < len(value) && isNumber(value[i]) {
			i++
		}
		n, ok := plainDecimal(value[start:i])
		unitStart := i
		for i < len(value) && !isNumber(value[i]) {
			i++
		}
		scale, known := goDurationUnits[value[unitStart:i]]
		if !ok || !known {
			return 0, false
		}
		total += n * scale
	}
	return total, true
}

// rfc3339From reads Anthropic's reset, an RFC 3339 time with a zone
// ("2024-05-01T12:00:30Z", "...+01:00", a fraction allowed), as seconds
// from now.
func rfc3339From(value string, now time.Time) (float64, bool) {
	if len(value) > maxScalarChars {
		return 0, false
	}
	when, err := time.Parse(time.RFC3339Nano, trimOWS(value))
	if err != nil {
		return 0, false
	}
	return when.Sub(now).Seconds(), true
}

// epochOrDelta reads x-ratelimit-reset by its magnitude: delta seconds
// (Reddit), epoch seconds (GitHub, X, Discord) or epoch milliseconds.
func epochOrDelta(value string, now time.Time) (float64, bool) {
	n, ok := scalarDecimal(value)
	if !ok || n < epochSeconds {
		return n, ok
	}
	if n >= epochMillis {
		n /= 1000
	}
	return n - float64(now.UnixNano())/1e9, true
}

// sfInteger reads a non-negative structured-field Integer (RFC 9651: at
// most 15 digits), as the IETF draft defines r and t.
func sfInteger(value string) (float64, bool) {
	value = trimOWS(value)
	if value == "" || len(value) > 15 || !asciiDigits(value) {
		return 0, false
	}
	n, ok := plainDecimal(value)
	return n, ok
}

// sfMembers reads a structured-field list loosely: each member's
// parameters, split on "," and ";" outside quoted strings, quotes around a
// value dropped. Empty when the value is over 512 characters; at most 16
// members.
func sfMembers(value string) []map[string]string {
	if len(value) > maxListChars {
		return nil
	}
	var members []map[string]string
	var parts []string
	var piece strings.Builder
	quoted := false
	for _, c := range value + "," {
		switch {
		case c == '"':
			quoted = !quoted
			piece.WriteRune(c)
		case !quoted && (c == ',' || c == ';'):
			parts = append(parts, strings.TrimSpace(piece.String()))
			piece.Reset()
			if c == ',' {
				params := map[string]string{}
				for _, param := range parts[1:] {
					key, text, _ := strings.Cut(param, "=")
					params[strings.TrimSpace(key)] = strings.Trim(strings.TrimSpace(text), `"`)
				}
				members = append(members, params)
				parts = nil
				if len(members) == maxListMembers {
					return members
				}
			}
		default:
			piece.WriteRune(c)
		}
	}
	return members
}
