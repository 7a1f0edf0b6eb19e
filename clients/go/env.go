package squawk

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// localProfile is what the fallback knows of the "default" profile.
type localProfile struct {
	maxAttempts int32
	backoff     Backoff
}

var builtinDefault = localProfile{maxAttempts: DefaultMaxAttempts, backoff: DefaultBackoff}

// profileFromEnv is the built-in "default" profile with the pod's
// SQUAWK_STEP_RETRY_INITIAL_DELAY, _MAX_DELAY and _MAX_ATTEMPTS overrides
// (or their TRUVAG3_STEP_RETRY_* names), read as the daemon reads them, so the
// fallback waits as the daemon in the same pod would. A bad value is
// reported in warnings and the default kept.
func profileFromEnv(lookup func(string) (string, bool)) (localProfile, []string) {
	p := builtinDefault
	backoff := p.backoff
	var warnings []string
	for _, suffix := range []string{"INITIAL_DELAY", "MAX_DELAY", "MAX_ATTEMPTS"} {
		name, raw, ok := "", "", false
		for _, prefix := range envPrefixes {
			if raw, ok = lookup(prefix + suffix); ok {
				name = prefix + suffix
				break
			}
		}
		if !ok {
			continue
		}
		switch suffix {
		case "INITIAL_DELAY", "MAX_DELAY":
			d, err := parseDuration(raw)
			if err == nil && d <= 0 {
				err = fmt.Errorf("must be positive")
			}
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("ignoring %s=%q: expected a positive duration such as 500ms (%v); keeping the default", name, raw, err))
				continue
			}
			if suffix == "INITIAL_DELAY" {
				backoff.Initial = d
			} else {
				backoff.Max = d
			}
		case "MAX_ATTEMPTS":
			n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
			if errors.Is(err, strconv.ErrRange) && n > 0 {
				err = nil // more digits than int64: as unbounded as MaxInt32
			}
			// An attempt is an int32, so a larger budget never runs out.
			n = min(n, math.MaxInt32)
			if err != nil || n < 1 {
				warnings = append(warnings, fmt.Sprintf("ignoring %s=%q: expected an integer >= 1; keeping the default", name, raw))
				continue
			}
			p.maxAttempts = int32(n)
		}
	}
	if backoff.Max < backoff.Initial {
		warnings = append(warnings, fmt.Sprintf("ignoring step retry delays: max delay %v is below initial delay %v", backoff.Max, backoff.Initial))
		backoff = p.backoff
	}
	p.backoff = backoff
	return p, warnings
}

var (
	durationFull = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|µs|ms|s|m|h))+$`)
	durationPart = regexp.MustCompile(`([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)`)
	unitMS       = map[string]float64{"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1, "s": 1e3, "m": 60e3, "h": 3600e3}
)

// parseDuration reads a duration the way the daemon's config does ("500ms",
// "1s", "1m30s"; no sign), to microseconds.
func parseDuration(text string) (time.Duration, error) {
	text = strings.TrimSpace(text)
	if !durationFull.MatchString(text) {
		return 0, fmt.Errorf("%q is not a duration such as 500ms, 1s or 1m30s", text)
	}
	var ms float64
	for _, m := range durationPart.FindAllStringSubmatch(text, -1) {
		n, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0, err
		}
		ms += n * unitMS[m[2]]
	}
	us := math.RoundToEven(ms * 1e3)
	if us >= float64(math.MaxInt64/int64(time.Microsecond)) {
		return 0, fmt.Errorf("%q is too long", text)
	}
	return time.Duration(us) * time.Microsecond, nil
}
