package squawk

import (
	"context"
	"testing"
	"time"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

func TestProfileFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		want     localProfile
		warnings int
	}{
		{"none", nil, builtinDefault, 0},
		{"all set", map[string]string{
			"SQUAWK_STEP_RETRY_INITIAL_DELAY": "250ms",
			"SQUAWK_STEP_RETRY_MAX_DELAY":     "1m30s",
			"SQUAWK_STEP_RETRY_MAX_ATTEMPTS":  "5",
		}, localProfile{5, Backoff{Initial: 250 * time.Millisecond, Max: 90 * time.Second, Factor: 2}}, 0},
		{"squawk name wins", map[string]string{
			"SQUAWK_STEP_RETRY_MAX_ATTEMPTS":  "4",
			"TRUVAG3_STEP_RETRY_MAX_ATTEMPTS": "9",
		}, localProfile{4, DefaultBackoff}, 0},
		{"guide name alone", map[string]string{"TRUVAG3_STEP_RETRY_INITIAL_DELAY": "1.5s"},
			localProfile{3, Backoff{Initial: 1500 * time.Millisecond, Max: 10 * time.Second, Factor: 2}}, 0},
		{"bad values kept default", map[string]string{
			"SQUAWK_STEP_RETRY_INITIAL_DELAY": "-1s",
			"SQUAWK_STEP_RETRY_MAX_DELAY":     "0s",
			"SQUAWK_STEP_RETRY_MAX_ATTEMPTS":  "0",
		}, builtinDefault, 3},
		{"max below initial", map[string]string{
			"SQUAWK_STEP_RETRY_INITIAL_DELAY": "20s",
		}, builtinDefault, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings := profileFromEnv(lookupIn(tc.env))
			if got != tc.want || len(warnings) != tc.warnings {
				t.Errorf("got %+v with warnings %q; want %+v with %d warnings", got, warnings, tc.want, tc.warnings)
			}
		})
	}
}

func TestFallbackFollowsPodEnv(t *testing.T) {
	t.Setenv("SQUAWK_STEP_RETRY_INITIAL_DELAY", "100ms")
	t.Setenv("SQUAWK_STEP_RETRY_MAX_ATTEMPTS", "2")
	c := deadClient(t)
	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Factor: 2}).Delay(1); d.Delay != want {
		t.Errorf("delay %v, want %v", d.Delay, want)
	}
	d, err = c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 2, HttpStatus: 503})
	if err != nil {
		t.Fatal(err)
	}
	if d.Reason != squawkv1.Reason_REASON_ATTEMPTS_EXHAUSTED {
		t.Errorf("attempt 2 of 2: %v, want ATTEMPTS_EXHAUSTED", d)
	}
}
