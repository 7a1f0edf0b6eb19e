package squawk

import (
	"context"
	"testing"
	"time"
)

// TestDaemonKillAndRestart runs one long step against the real daemon, kills
// the daemon (SIGKILL) in the middle, sees the decisions come from the local
// fallback, restarts the daemon on the same port and sees them come from the
// daemon again, all within one Run.
func TestDaemonKillAndRestart(t *testing.T) {
	addr := mustFreeAddr(t)
	d, err := startDaemon(addr)
	if err != nil {
		t.Fatalf("cannot run the Squawk daemon: %v", err)
	}
	t.Cleanup(func() { d.kill() })
	c := newClient(t, addr, WithCallTimeout(time.Second))

	const (
		up = iota
		killed
		restarted
		each = 3 // decisions to see in each phase
	)
	type seen struct {
		phase    int
		fallback bool
	}
	var (
		phase     = up
		decisions []seen
		rec       sleepRecorder
	)
	count := func(p int, fallback bool) int {
		n := 0
		for _, s := range decisions {
			if s.phase == p && s.fallback == fallback {
				n++
			}
		}
		return n
	}
	step := func(context.Context, string) (string, error) {
		switch phase {
		case up:
			if count(up, false) >= each {
				d.kill()
				phase = killed
			}
		case killed:
			if count(killed, true) >= each {
				if d, err = startDaemon(addr); err != nil {
					t.Fatalf("restart on %s: %v", addr, err)
				}
				phase = restarted
			}
		case restarted:
			if count(restarted, false) >= each {
				return "done", nil
			}
			// The channel reconnects within its short backoff; don't spin.
			time.Sleep(10 * time.Millisecond)
		}
		return "", &StepError{HTTPStatus: 503}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	got, err := Run(ctx, c, "params", step, RunOptions[string]{
		MaxAttempts: new(100000),
		Sleep:       rec.sleep,
		OnError: func(info ErrorInfo) Tier {
			decisions = append(decisions, seen{phase, info.Decision.Fallback})
			return TierDefault
		},
	})
	if err != nil || got != "done" {
		t.Fatalf("Run = %q, %v", got, err)
	}
	t.Logf("%d decisions in %v; fallback decisions: %d", len(decisions), time.Since(start), c.FallbackCount())

	if n := count(up, true); n != 0 {
		t.Errorf("%d fallback decisions while the daemon was up", n)
	}
	if n := count(killed, false); n != 0 {
		t.Errorf("%d daemon decisions while the daemon was dead", n)
	}
	last := decisions[len(decisions)-1]
	if last.phase != restarted || last.fallback {
		t.Errorf("the last decision %+v is not the restarted daemon's", last)
	}
	fallbacks := 0
	for _, s := range decisions {
		if s.fallback {
			fallbacks++
		}
	}
	if int64(fallbacks) != c.FallbackCount() {
		t.Errorf("FallbackCount = %d, want %d", c.FallbackCount(), fallbacks)
	}
	// Daemon and fallback agree on the backoff: attempt n waits Delay(n).
	for i, wait := range rec.waits {
		if want := DefaultBackoff.Delay(i + 1); wait != want {
			t.Fatalf("wait %d = %v, want %v", i+1, wait, want)
		}
	}
}
