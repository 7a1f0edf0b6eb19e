package squawk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time          { return f.t }
func (f *fakeClock) advance(d time.Duration) { f.t = f.t.Add(d) }

func leasedClient(t *testing.T, answers ...string) (*Client, *scriptedDaemon, *fakeClock) {
	t.Helper()
	c, sd := scriptedClient(t, answers...)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.cfg.now = clock.now
	return c, sd, clock
}

// dispatch runs one successful step to api.example with capability and
// fails the test on an error.
func dispatch(t *testing.T, c *Client, capability string) {
	t.Helper()
	if _, err := Run(context.Background(), c, 0, func(context.Context, int) (int, error) { return 0, nil },
		RunOptions[int]{Upstream: "api.example", Capability: capability}); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func (sd *scriptedDaemon) permitsAsked() []int32 {
	var asked []int32
	for _, r := range sd.admitted() {
		asked = append(asked, r.GetPermits())
	}
	return asked
}

// Three permits granted for 200 ms start three dispatches with one Admit;
// the fourth asks again.
func TestRunUsesSparePermitsWithinTheLease(t *testing.T) {
	c, sd, clock := leasedClient(t, `{"allowed": true, "permits": 3, "lease": "0.200s"}`, `{"allowed": true, "permits": 1}`)
	for range 3 {
		dispatch(t, c, "")
		clock.advance(50 * time.Millisecond) // 0, 50 and 100 ms: inside the lease
	}
	if n := len(sd.admitted()); n != 1 {
		t.Fatalf("%d Admits for three dispatches on three permits, want 1", n)
	}
	dispatch(t, c, "")
	if n := len(sd.admitted()); n != 2 {
		t.Errorf("%d Admits after the permits were used, want 2", n)
	}
}

// A spare permit is never used once its lease has ended.
func TestRunLetsSparePermitsLapse(t *testing.T) {
	c, sd, clock := leasedClient(t, `{"allowed": true, "permits": 3, "lease": "0.200s"}`, `{"allowed": true, "permits": 1}`)
	dispatch(t, c, "")
	clock.advance(200 * time.Millisecond) // the lease's end: lapsed
	dispatch(t, c, "")
	if n := len(sd.admitted()); n != 2 {
		t.Errorf("%d Admits, want 2: the spares lapsed with their lease", n)
	}
}

// Run asks for as many permits as it started dispatches to the key in the
// current or the previous 200 ms window, 1 when idle.
func TestRunAsksForWhatItStartedInTheLastWindow(t *testing.T) {
	c, sd, clock := leasedClient(t, allowed(6)...)
	for range 4 {
		dispatch(t, c, "") // at 0 ms: the window counts 1, 2, 3, 4
	}
	clock.advance(250 * time.Millisecond)
	dispatch(t, c, "") // the window from 200 ms counts 1, the previous one 4
	clock.advance(450 * time.Millisecond)
	dispatch(t, c, "") // at 700 ms, two windows after 200 ms: none before
	if got, want := sd.permitsAsked(), []int32{1, 2, 3, 4, 4, 1}; !slices.Equal(got, want) {
		t.Errorf("permits asked %v, want %v", got, want)
	}
}

// A probe is for one dispatch, whatever permits it states. (A paced grant
// keeps its spares: see TestRunSleepsUntilALeasedPermitsStart.)
func TestRunKeepsNoSpareOfAProbeGrant(t *testing.T) {
	c, sd, _ := leasedClient(t,
		`{"allowed": true, "permits": 3, "lease": "1s", "probe": true}`,
		`{"allowed": true, "permits": 1}`)
	for range 2 {
		dispatch(t, c, "")
	}
	if n := len(sd.admitted()); n != 2 {
		t.Errorf("%d Admits for two dispatches, want 2", n)
	}
}

// sleeps records the waits Run sleeps, without sleeping.
type sleeps struct {
	mu  sync.Mutex
	got []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, d)
	return ctx.Err()
}

// A lease of paced starts: the first permit waits the answer's Wait, and
// each spare one is slept until its own start, Wait + i x Spacing from the
// answer, like a paced Admit's wait, without asking again.
func TestRunSleepsUntilALeasedPermitsStart(t *testing.T) {
	c, sd, clock := leasedClient(t,
		`{"allowed": true, "permits": 3, "lease": "0.200s", "wait": "0.010s", "spacing": "0.050s"}`,
		`{"allowed": true, "permits": 1}`)
	var s sleeps
	run := func() {
		t.Helper()
		if _, err := Run(context.Background(), c, 0, func(context.Context, int) (int, error) { return 0, nil },
			RunOptions[int]{Upstream: "api.example", Sleep: s.sleep}); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	run()                                 // the answer's wait: 10 ms
	run()                                 // the first spare starts at 60 ms
	clock.advance(100 * time.Millisecond) // the second at 110 ms
	run()
	if n := len(sd.admitted()); n != 1 {
		t.Errorf("%d Admits for three dispatches on three permits, want 1", n)
	}
	want := []time.Duration{10 * time.Millisecond, 60 * time.Millisecond, 10 * time.Millisecond}
	if !slices.Equal(s.got, want) {
		t.Errorf("slept %v, want %v", s.got, want)
	}
}

// A spare permit that starts past the step's deadline is not used: the
// step asks Admit instead, and sleeps nothing.
func TestRunAsksWhenTheLeasedPermitStartsPastTheDeadline(t *testing.T) {
	c, sd, _ := leasedClient(t,
		`{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "0.100s"}`,
		`{"allowed": true, "permits": 1}`)
	var s sleeps
	step := func(context.Context, int) (int, error) { return 0, nil }
	if _, err := Run(context.Background(), c, 0, step, RunOptions[int]{Upstream: "api.example", Sleep: s.sleep}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Run(ctx, c, 0, step, RunOptions[int]{Upstream: "api.example", Sleep: s.sleep}); err != nil {
		t.Fatalf("Run with a deadline before the spare's start: %v", err)
	}
	if n := len(sd.admitted()); n != 2 {
		t.Errorf("%d Admits, want 2: the spare starts past the deadline", n)
	}
	if len(s.got) != 0 {
		t.Errorf("slept %v, want nothing", s.got)
	}
}

// A step whose ctx ends while it waits for its leased permit's start ends
// cancelled, without dispatching.
func TestRunCancelledWhileWaitingForALeasedPermit(t *testing.T) {
	c, _, _ := leasedClient(t, `{"allowed": true, "permits": 2, "lease": "0.200s", "spacing": "0.050s"}`)
	dispatch(t, c, "")
	called := false
	_, err := Run(context.Background(), c, 0, func(context.Context, int) (int, error) {
		called = true
		return 0, nil
	}, RunOptions[int]{Upstream: "api.example", Sleep: func(_ context.Context, d time.Duration) error {
		if d != 50*time.Millisecond {
			t.Errorf("slept %v, want the spare's start, 50ms", d)
		}
		return context.Canceled
	}})
	var re *RunError
	if !errors.As(err, &re) || re.Decision.Reason != squawkv1.Reason_REASON_CANCELLED || re.Calls != 0 {
		t.Fatalf("Run = %v, want a RunError cancelled before any call", err)
	}
	if called {
		t.Error("the step was dispatched after its wait was cancelled")
	}
}

// Spare permits belong to their (profile, upstream, capability).
func TestRunSparePermitsArePerKey(t *testing.T) {
	c, sd, _ := leasedClient(t, `{"allowed": true, "permits": 2, "lease": "1s"}`, `{"allowed": true, "permits": 1}`)
	dispatch(t, c, "search")
	dispatch(t, c, "book") // another capability asks
	dispatch(t, c, "search")
	if n := len(sd.admitted()); n != 2 {
		t.Errorf("%d Admits, want 2: the spare of search is search's", n)
	}
}

// A flood of names fills the table to its bound and no further; a name
// past it asks for one permit, and names idle for two windows make room.
func TestLeaseTableIsBounded(t *testing.T) {
	var l leaseTable
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxLeaseKeys {
		l.start(leaseKey{upstream: fmt.Sprint(i)}, t0, noDeadline)
	}
	key := leaseKey{upstream: "one too many"}
	l.start(key, t0, noDeadline)
	if _, spare, ask := l.start(key, t0, noDeadline); spare || ask != 1 {
		t.Errorf("start past the bound = %v, %d; want false, 1", spare, ask)
	}
	if len(l.entries) != maxLeaseKeys {
		t.Errorf("%d keys tracked, want %d", len(l.entries), maxLeaseKeys)
	}
	later := t0.Add(2 * permitWindow)
	l.start(key, later, noDeadline)
	if _, spare, ask := l.start(key, later, noDeadline); spare || ask != 2 || len(l.entries) != 1 {
		t.Errorf("after the idle keys' windows: start = %v, %d with %d keys; want false, 2 with 1", spare, ask, len(l.entries))
	}
}

// Executors' goroutines sharing a client never start more dispatches than
// the pod granted permits, and every success is reported once.
func TestRunSharesPermitsAcrossGoroutinesWithinTheGrants(t *testing.T) {
	const goroutines, each, granted = 8, 25, 5
	answers := make([]string, goroutines*each)
	for i := range answers {
		answers[i] = fmt.Sprintf(`{"allowed": true, "permits": %d, "lease": "10s"}`, granted)
	}
	c, sd, _ := leasedClient(t, answers...) // the clock stands still: no lease ends
	var started atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				if _, err := Run(context.Background(), c, 0, func(context.Context, int) (int, error) {
					started.Add(1)
					return 0, nil
				}, RunOptions[int]{Upstream: "api.example"}); err != nil {
					t.Errorf("Run: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	admits := len(sd.admitted())
	if n := started.Load(); n != goroutines*each || int64(admits*granted) < n {
		t.Errorf("%d dispatches on %d Admits of %d permits each", n, admits, granted)
	}
	if admits == goroutines*each {
		t.Errorf("every dispatch asked Admit: no spare permit was used")
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if len(sd.reported) != goroutines*each {
		t.Errorf("%d successes reported, want %d", len(sd.reported), goroutines*each)
	}
}

// A lease of an hour is kept a second at most, as in every client: a spare
// outliving a change of the upstream's state would start a call the pod
// now refuses.
func TestRunKeepsASparePermitASecondAtMost(t *testing.T) {
	c, sd, clock := leasedClient(t, `{"allowed": true, "permits": 3, "lease": "3600s"}`, `{"allowed": true, "permits": 1}`)
	dispatch(t, c, "")
	clock.advance(999 * time.Millisecond)
	dispatch(t, c, "") // a spare: 999 ms is inside the second
	if n := len(sd.admitted()); n != 1 {
		t.Fatalf("%d Admits within the second, want 1", n)
	}
	clock.advance(time.Millisecond)
	dispatch(t, c, "") // the last spare lapsed at 1 s
	if n := len(sd.admitted()); n != 2 {
		t.Errorf("%d Admits after a second, want 2", n)
	}
}

// A failed dispatch gives up the key's spare permits: the pod may refuse
// the next one (its breaker, its cool-down), so the next dispatch asks.
func TestRunGivesUpTheSparePermitsWhenADispatchFails(t *testing.T) {
	c, sd, _ := leasedClient(t, `{"allowed": true, "permits": 3, "lease": "0.200s"}`, `{"allowed": true, "permits": 1}`)
	failed := func(context.Context, int) (int, error) { return 0, &StepError{HTTPStatus: 400} }
	_, _ = Run(context.Background(), c, 0, failed, RunOptions[int]{Upstream: "api.example"})
	dispatch(t, c, "")
	if n := len(sd.admitted()); n != 2 {
		t.Errorf("%d Admits, want 2: the failure gave up the two spares", n)
	}
}

// Every dispatch started on a permit of a lease names the lease's admission
// in its report, and a dispatch admitted by its own answer names that one:
// the daemon frees a slot of its concurrency limit only for an outcome that
// names a live admission.
func TestEachReportNamesTheAdmissionOfItsPermit(t *testing.T) {
	c, sd, clock := leasedClient(t,
		`{"allowed": true, "permits": 2, "lease": "0.200s", "admissionId": "00000000000000a1"}`,
		`{"allowed": true, "permits": 1, "admissionId": "00000000000000a2"}`)
	for range 3 {
		dispatch(t, c, "")
		clock.advance(50 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	var named []string
	for _, o := range sd.reported {
		named = append(named, o.GetAdmissionId())
	}
	if want := []string{"00000000000000a1", "00000000000000a1", "00000000000000a2"}; !slices.Equal(named, want) {
		t.Errorf("reports name %v, want %v", named, want)
	}
}
