package squawk

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// DefaultOutcomeDelay is how long Run holds a success report to send it
// with others, when WithOutcomeDelay is not given.
const DefaultOutcomeDelay = 50 * time.Millisecond

// patientOutcomeDelay is how long a patient report may be held: the
// success of a dispatch started on a lease of paced starts (a Spacing
// above zero) waits up to the pod's lease (200 ms), so that a busy
// executor reports once a lease rather than four times. Such a lease comes
// only under a declared or announced rate, where nothing in the pod reads
// such a success sooner: the rate is not learned from it, and its headers
// are read as of their age.
// The same in every client.
const patientOutcomeDelay = 200 * time.Millisecond

// outcomeBatchSize is the most outcomes Run's reports hold before they are
// sent, whatever their age: a busy executor sends one ReportOutcome per 100
// successes instead of one each.
const outcomeBatchSize = 100

// outcomeQueue holds Run's success reports until they are sent together:
// when the batch is due, when 100 are queued, or on Close. Each report is
// due the outcome delay (DefaultOutcomeDelay unless WithOutcomeDelay) after
// it was queued, a patient one patientOutcomeDelay after (or the delay,
// when longer), and the batch at the earliest due time of what it holds:
// a report queued behind a patient one brings the batch back to its own.
// An urgent report (the success of a call that held a slot of the
// upstream's declared cap on calls in flight, see Admission.HoldsSlot)
// makes the batch due now, whatever else it holds: the pod frees the slot
// only when the outcome comes, and another caller may be waiting for it.
// Any other report is only a sample for the pod's breaker, budget and
// pace, so a little lateness costs nothing; the daemon's work per dispatch
// is what a busy pod pays for.
//
// Each report goes with its age (Outcome.age), the time since it was queued
// right after its response: the daemon reads an absolute reset in its
// headers as of then. One older than maxOutcomeAge is not sent (the daemon
// refuses a batch that holds one); with batches due within the delay, only
// a stalled send could leave one that old.
type outcomeQueue struct {
	mu      sync.Mutex
	pending []*squawkv1.Outcome
	// queued is when each pending report was queued, in the same order.
	queued []time.Time
	// due is when the batch is due (on the client's clock), which the
	// timer keeps; zero when nothing is pending.
	due     time.Time
	timer   *time.Timer
	closed  bool
	sending sync.WaitGroup
	// afterFunc arms the timer; nil = time.AfterFunc. Tests swap it to see
	// when a batch is due without waiting for it.
	afterFunc func(time.Duration, func()) *time.Timer
}

// queueOutcome reports o with the next batch, or at once when batching is
// off or the client is closed (where the call fails open at once); a
// patient o may wait patientOutcomeDelay, and an urgent one sends its
// batch now.
func (c *Client) queueOutcome(o *squawkv1.Outcome, patient, urgent bool) {
	q := &c.outcomes
	q.mu.Lock()
	if c.cfg.outcomeDelay <= 0 || q.closed {
		q.mu.Unlock()
		o.Age = durationpb.New(0)
		c.sendOutcomes([]*squawkv1.Outcome{o})
		return
	}
	now, delay := c.cfg.now(), c.cfg.outcomeDelay
	if patient {
		delay = max(delay, patientOutcomeDelay)
	}
	q.pending = append(q.pending, o)
	q.queued = append(q.queued, now)
	if len(q.pending) < outcomeBatchSize && !urgent {
		if due := now.Add(delay); q.timer == nil || due.Before(q.due) {
			// Stopped too late (it fired, and its flushDue waits for
			// q.mu), the old timer sends this report early with the
			// rest, which is never wrong.
			if q.timer != nil {
				q.timer.Stop()
			}
			arm := q.afterFunc
			if arm == nil {
				arm = time.AfterFunc
			}
			q.due, q.timer = due, arm(delay, c.flushDue)
		}
		q.mu.Unlock()
		return
	}
	// Full or urgent: the batch goes now, off the step's goroutine.
	batch := q.take(c.cfg.now())
	q.sending.Add(1)
	q.mu.Unlock()
	go func() {
		defer q.sending.Done()
		if len(batch) > 0 {
			c.sendOutcomes(batch)
		}
	}()
}

// maxOutcomeAge is Outcome.age's bound on the wire.
const maxOutcomeAge = time.Minute

// take empties the queue and stops its timer, setting each report's age at
// now; q.mu is held.
func (q *outcomeQueue) take(now time.Time) []*squawkv1.Outcome {
	batch := q.pending[:0:0]
	for i, o := range q.pending {
		age := max(now.Sub(q.queued[i]), 0)
		if age > maxOutcomeAge {
			continue
		}
		o.Age = durationpb.New(age)
		batch = append(batch, o)
	}
	q.pending, q.queued, q.due = nil, nil, time.Time{}
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	return batch
}

// flushDue sends the queue when its batch is due.
func (c *Client) flushDue() {
	q := &c.outcomes
	q.mu.Lock()
	if q.closed || len(q.pending) == 0 {
		q.mu.Unlock()
		return
	}
	batch := q.take(c.cfg.now())
	q.sending.Add(1)
	q.mu.Unlock()
	defer q.sending.Done()
	if len(batch) > 0 {
		c.sendOutcomes(batch)
	}
}

// flushOnClose sends what is queued, waits for the batches on their way,
// and makes later reports go out one by one.
func (c *Client) flushOnClose() {
	q := &c.outcomes
	q.mu.Lock()
	q.closed = true
	batch := q.take(c.cfg.now())
	q.mu.Unlock()
	if len(batch) > 0 {
		c.sendOutcomes(batch)
	}
	q.sending.Wait()
}

// sendOutcomes reports one batch (at most outcomeBatchSize, under the
// daemon's limit). Its error is ignored, as each report's was: the steps
// have their results. Failing open, it counts one fallback for the batch.
func (c *Client) sendOutcomes(batch []*squawkv1.Outcome) {
	_, _ = c.ReportOutcome(context.Background(), &squawkv1.ReportOutcomeRequest{Outcomes: batch})
}
