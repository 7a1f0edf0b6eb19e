package squawk

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// succeed runs n successful steps to api.example on c, one after another.
func succeed(t *testing.T, c *Client, n int) {
	t.Helper()
	for i := range n {
		if _, err := Run(context.Background(), c, i, func(context.Context, int) (int, error) { return 0, nil },
			RunOptions[int]{Upstream: "api.example", Cost: 7}); err != nil {
			t.Fatalf("Run %d: %v", i, err)
		}
	}
}

// reportBatches is the size of each ReportOutcome the server has seen.
func (sd *scriptedDaemon) reportBatches() []int {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	return slices.Clone(sd.batches)
}

func allowed(n int) []string {
	answers := make([]string, n)
	for i := range answers {
		answers[i] = `{"allowed": true, "permits": 1}`
	}
	return answers
}

// 250 successes are three reports: one per 100 as they fill, and the last
// 50 on Close. The delay is made too long to fire, so that only the count
// and Close send.
func TestRunReportsSuccessesInBatchesOfAHundred(t *testing.T) {
	c, sd := scriptedClient(t, allowed(250)...)
	c.cfg.outcomeDelay = time.Hour
	succeed(t, c, 250)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := sd.reportBatches()
	slices.Sort(got) // the two full batches go out concurrently
	if want := []int{50, 100, 100}; !slices.Equal(got, want) {
		t.Errorf("ReportOutcome batches %v, want %v", got, want)
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	for _, o := range sd.reported {
		if o.GetUpstream() != "api.example" || !o.GetSuccess() || o.GetCost() != 7 || o.GetLatency() == nil {
			t.Fatalf("reported %v, want each success with its cost and latency", o)
		}
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d", c.FallbackCount())
	}
}

// A held report goes out when its delay is up, without Close.
func TestRunSendsAHeldReportAfterTheDelay(t *testing.T) {
	c, sd := scriptedClient(t, allowed(1)...)
	c.cfg.outcomeDelay = 10 * time.Millisecond
	succeed(t, c, 1)
	// Only a hang is the defect here: the bound is generous.
	for end := time.Now().Add(10 * time.Second); len(sd.reportBatches()) == 0; {
		if time.Now().After(end) {
			t.Fatal("the held report was never sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := sd.reportBatches(); !slices.Equal(got, []int{1}) {
		t.Errorf("ReportOutcome batches %v, want [1]", got)
	}
}

// WithOutcomeDelay(0) sends each report before Run returns.
func TestRunWithoutOutcomeDelayReportsAtOnce(t *testing.T) {
	c, sd := scriptedClient(t, allowed(2)...)
	c.cfg.outcomeDelay = 0
	succeed(t, c, 2)
	if got := sd.reportBatches(); !slices.Equal(got, []int{1, 1}) {
		t.Errorf("ReportOutcome batches before Close %v, want [1 1]", got)
	}
}

// After Close, a report is not held (nothing would send it): it goes out
// at once, fails open on the closed connection, and counts its fallback.
func TestReportAfterCloseFailsOpenAtOnce(t *testing.T) {
	c, _ := scriptedClient(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.reportSuccess(&squawkv1.AdmitRequest{Upstream: "api.example"}, admitted{}, time.Millisecond, nil)
	if c.FallbackCount() != 1 {
		t.Errorf("FallbackCount = %d, want 1", c.FallbackCount())
	}
}

func TestNewRefusesAnOutcomeDelayOutOfRange(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, time.Second + 1} {
		if c, err := New("127.0.0.1:1", WithOutcomeDelay(d)); err == nil {
			c.Close()
			t.Errorf("New(WithOutcomeDelay(%v)) = nil error", d)
		}
	}
	for _, d := range []time.Duration{0, time.Second} {
		c, err := New("127.0.0.1:1", WithOutcomeDelay(d))
		if err != nil {
			t.Errorf("New(WithOutcomeDelay(%v)) = %v", d, err)
			continue
		}
		c.Close()
	}
}

// Each report goes with its age, the time from its queueing (right after
// the response) to its batch: the daemon reads an absolute reset in its
// headers as of then.
func TestEachReportGoesWithItsAge(t *testing.T) {
	c, sd, clock := leasedClient(t, allowed(2)...)
	dispatch(t, c, "")
	clock.advance(30 * time.Millisecond)
	dispatch(t, c, "")
	clock.advance(20 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	var ages []time.Duration
	for _, o := range sd.reported {
		ages = append(ages, o.GetAge().AsDuration())
	}
	if want := []time.Duration{50 * time.Millisecond, 20 * time.Millisecond}; !slices.Equal(ages, want) {
		t.Errorf("ages %v, want %v", ages, want)
	}
}

// armed records the delays the outcome queue arms its timer with; the
// timers it returns never fire within a test, so only the count and Close
// send.
type armed struct {
	mu  sync.Mutex
	got []time.Duration
}

func (a *armed) afterFunc(d time.Duration, f func()) *time.Timer {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, d)
	return time.AfterFunc(time.Hour, f)
}

func (a *armed) delays() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// A success started on a lease of paced starts (a spacing above zero),
// whether on its first permit or a spare one, may be held a lease (200 ms)
// before its batch goes; one started on a lease nothing paces, or on a
// single permit, keeps the outcome delay; and a report queued behind a
// patient one brings the batch due back to its own time, the earliest of
// what the batch holds.
func TestAPatientSuccessIsHeldALeaseUntilAnImpatientOneJoinsIt(t *testing.T) {
	c, sd, clock := leasedClient(t,
		`{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "0.005s"}`, // capability "paced"
		`{"allowed": true, "permits": 3, "lease": "0.200s"}`,                      // capability "unpaced"
		`{"allowed": true, "permits": 1}`)                                         // capability "single"
	var a armed
	c.outcomes.afterFunc = a.afterFunc
	t0 := clock.now()
	due := func() time.Duration {
		c.outcomes.mu.Lock()
		defer c.outcomes.mu.Unlock()
		return c.outcomes.due.Sub(t0)
	}

	dispatch(t, c, "paced") // the lease's first permit: patient
	if got, want := a.delays(), []time.Duration{patientOutcomeDelay}; !slices.Equal(got, want) || due() != 200*time.Millisecond {
		t.Fatalf("after a paced lease's success: armed %v, due at %v; want %v, at 200ms", got, due(), want)
	}
	clock.advance(10 * time.Millisecond)
	dispatch(t, c, "paced") // a spare permit, started at once: patient, due later
	if got := a.delays(); len(got) != 1 || due() != 200*time.Millisecond {
		t.Fatalf("after a spare's success: armed %v, due at %v; want the batch due at 200ms still", got, due())
	}
	clock.advance(10 * time.Millisecond)
	dispatch(t, c, "unpaced") // a lease nothing paces: the outcome delay
	want := []time.Duration{patientOutcomeDelay, DefaultOutcomeDelay}
	if got := a.delays(); !slices.Equal(got, want) || due() != 70*time.Millisecond {
		t.Fatalf("after an unpaced lease's success: armed %v, due at %v; want %v, at 70ms", got, due(), want)
	}
	clock.advance(10 * time.Millisecond)
	dispatch(t, c, "single") // due at 80 ms: after the batch, which stays due at 70
	if got := a.delays(); !slices.Equal(got, want) || due() != 70*time.Millisecond {
		t.Fatalf("after a single permit's success: armed %v, due at %v; want %v, at 70ms", got, due(), want)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sd.reportBatches(); !slices.Equal(got, []int{4}) {
		t.Errorf("ReportOutcome batches %v, want the four reports in one", got)
	}
}

// An outcome delay longer than a lease holds a patient report as long as
// the others: patience never sends a report sooner.
func TestAPatientSuccessWaitsAtLeastTheOutcomeDelay(t *testing.T) {
	c, _, _ := leasedClient(t, `{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "0.005s"}`)
	c.cfg.outcomeDelay = 500 * time.Millisecond
	var a armed
	c.outcomes.afterFunc = a.afterFunc
	dispatch(t, c, "")
	if got, want := a.delays(), []time.Duration{500 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("armed %v, want %v", got, want)
	}
}

// On the real timer, a patient report is not sent within the outcome delay
// but is sent after the lease, without Close.
func TestRunSendsAPatientReportAfterALease(t *testing.T) {
	c, sd := scriptedClient(t, `{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "0.050s"}`)
	succeed(t, c, 1)
	// A timer armed for 200 ms cannot fire sooner, however loaded the machine.
	time.Sleep(2 * DefaultOutcomeDelay)
	if got := sd.reportBatches(); len(got) != 0 {
		t.Fatalf("ReportOutcome batches %v within %v, want none before the lease", got, 2*DefaultOutcomeDelay)
	}
	// Only a hang is the defect here: the bound is generous.
	for end := time.Now().Add(10 * time.Second); len(sd.reportBatches()) == 0; {
		if time.Now().After(end) {
			t.Fatal("the patient report was never sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := sd.reportBatches(); !slices.Equal(got, []int{1}) {
		t.Errorf("ReportOutcome batches %v, want [1]", got)
	}
}

// held is how many reports the outcome queue holds and when their batch is
// due (zero when none).
func held(c *Client) (int, time.Time) {
	c.outcomes.mu.Lock()
	defer c.outcomes.mu.Unlock()
	return len(c.outcomes.pending), c.outcomes.due
}

// The success of a call that held a slot of a declared cap on calls in
// flight sends its batch when it is queued, with what the batch held
// (patient or not), without arming a timer; the next report is held by the
// usual rules again.
func TestAnUrgentSuccessSendsItsBatchAtOnce(t *testing.T) {
	c, sd, clock := leasedClient(t,
		`{"allowed": true, "permits": 3, "lease": "0.200s", "spacing": "0.005s"}`, // capability "paced"
		`{"allowed": true, "permits": 1}`,                                         // capability "single"
		`{"allowed": true, "permits": 1, "holdsSlot": true}`,                      // capability "capped"
		`{"allowed": true, "permits": 1}`)                                         // capability "single"
	var a armed
	c.outcomes.afterFunc = a.afterFunc

	dispatch(t, c, "paced")
	clock.advance(10 * time.Millisecond)
	dispatch(t, c, "single")
	clock.advance(10 * time.Millisecond)
	dispatch(t, c, "capped")
	if n, due := held(c); n != 0 || !due.IsZero() {
		t.Fatalf("after a success holding a slot: %d reports held, due %v; want none held", n, due)
	}
	c.outcomes.sending.Wait()
	if got := sd.reportBatches(); !slices.Equal(got, []int{3}) {
		t.Fatalf("ReportOutcome batches %v before Close, want the three reports in one", got)
	}
	want := []time.Duration{patientOutcomeDelay, DefaultOutcomeDelay}
	if got := a.delays(); !slices.Equal(got, want) {
		t.Fatalf("armed %v, want %v: no timer for the urgent report", got, want)
	}

	dispatch(t, c, "single")
	want = append(want, DefaultOutcomeDelay)
	if n, _ := held(c); n != 1 || !slices.Equal(a.delays(), want) {
		t.Fatalf("after the next success: %d held, armed %v; want 1 held, armed %v", n, a.delays(), want)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sd.reportBatches(); !slices.Equal(got, []int{3, 1}) {
		t.Errorf("ReportOutcome batches %v, want [3 1]", got)
	}
}

// On the real timer, with an outcome delay too long to fire, Run reports
// the success of a call that held a slot before Close, naming its
// admission: the pod frees the slot only then.
func TestRunReportsASuccessHoldingASlotAtOnce(t *testing.T) {
	c, sd := scriptedClient(t, `{"allowed": true, "permits": 1, "admissionId": "00000000000000ab", "holdsSlot": true}`)
	c.cfg.outcomeDelay = time.Hour
	succeed(t, c, 1)
	// Only a hang is the defect here: the bound is generous.
	for end := time.Now().Add(10 * time.Second); len(sd.reportBatches()) == 0; {
		if time.Now().After(end) {
			t.Fatal("the report of a success holding a slot was held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := sd.reportBatches(); !slices.Equal(got, []int{1}) {
		t.Fatalf("ReportOutcome batches %v, want [1]", got)
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if got := sd.reported[0].GetAdmissionId(); got != "00000000000000ab" {
		t.Errorf("reported admission %q, want 00000000000000ab", got)
	}
}

// Only the dispatch on the answer holds its slot: a spare permit of the
// same answer (which a daemon should not lease under a cap) is reported by
// the usual rules.
func TestASparePermitHoldsNoSlot(t *testing.T) {
	c, sd, _ := leasedClient(t, `{"allowed": true, "permits": 2, "lease": "0.200s", "holdsSlot": true}`)
	var a armed
	c.outcomes.afterFunc = a.afterFunc
	dispatch(t, c, "")
	c.outcomes.sending.Wait()
	dispatch(t, c, "")
	if n := len(sd.admitted()); n != 1 {
		t.Fatalf("%d Admits, want the second dispatch on the spare permit", n)
	}
	if got := sd.reportBatches(); !slices.Equal(got, []int{1}) {
		t.Errorf("ReportOutcome batches %v before Close, want only the first success sent", got)
	}
	if n, _ := held(c); n != 1 || !slices.Equal(a.delays(), []time.Duration{DefaultOutcomeDelay}) {
		t.Errorf("%d held, armed %v; want the spare's success held the outcome delay", n, a.delays())
	}
}
