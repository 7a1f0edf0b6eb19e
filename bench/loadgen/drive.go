package main

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// phases of a run: only calls that complete while measuring are recorded.
const (
	warming int32 = iota
	measuring
	done
)

// tally is what one run observed in its measurement window.
type tally struct {
	hist  histogram
	mu    sync.Mutex
	codes map[string]int
	// One message per code, so a failed row says why.
	messages map[string]string
	errors   atomic.Int64
	missed   atomic.Int64
	// Every call answered OK, warm-up and stragglers included: what a
	// traced server made spans for.
	answered atomic.Int64
}

func newTally() *tally { return &tally{codes: map[string]int{}, messages: map[string]string{}} }

// notSent names, among the codes, the calls the client-side throttle
// refused without sending (a RESOURCE_EXHAUSTED of the client's own).
const notSent = "NotSent"

func (t *tally) fail(err error) {
	t.errors.Add(1)
	code := status.Code(err).String()
	if strings.HasPrefix(status.Convert(err).Message(), "squawk: not sent:") {
		code = notSent
	}
	t.mu.Lock()
	t.codes[code]++
	if _, seen := t.messages[code]; !seen {
		t.messages[code] = status.Convert(err).Message()
	}
	t.mu.Unlock()
}

// caller sends call n on connection n mod conns, with payload n mod payloads.
type caller struct {
	conns    []*grpc.ClientConn
	method   string
	payloads [][]byte
	timeout  time.Duration
	// rest: an executor told "not decided" goes on with its step on the
	// fallback, so it asks again no sooner than a call with no answer at
	// all would have let it (the call's deadline after it began).
	rest bool
}

func (c *caller) call(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var reply []byte
	return c.conns[n%len(c.conns)].Invoke(ctx, c.method, c.payloads[n%len(c.payloads)], &reply)
}

// closedLoop keeps `concurrency` calls in flight: each worker sends its next
// call as soon as the last one answers. This finds saturation; its latency
// is mostly queueing (Little's law), so compare it only at equal concurrency.
func closedLoop(c *caller, cfg config, marks *marker) (*tally, time.Duration) {
	t := newTally()
	var phase atomic.Int32
	var wg sync.WaitGroup
	for w := range cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := w; phase.Load() != done; n += cfg.concurrency {
				start := time.Now()
				err := c.call(n)
				if err == nil {
					t.answered.Add(1)
				} else if c.rest {
					time.Sleep(time.Until(start.Add(c.timeout)))
				}
				if phase.Load() != measuring {
					continue
				}
				if err != nil {
					t.fail(err)
				} else {
					t.hist.record(time.Since(start))
				}
			}
		}()
	}
	time.Sleep(cfg.warmup)
	phase.Store(measuring)
	start := marks.begin()
	time.Sleep(cfg.duration)
	phase.Store(done)
	elapsed := marks.end(start)
	wg.Wait()
	return t, elapsed
}

// openLoop sends calls on a fixed schedule whatever the answers do, and
// times each from when it was due, not when it went out, so a server that
// falls behind shows its queueing delay (no coordinated omission). In-flight
// calls are capped; past the window plus one more window of catch-up, calls
// still unsent are counted as missed rather than sent.
func openLoop(c *caller, cfg config, marks *marker) (*tally, time.Duration) {
	t := newTally()
	slots := make(chan struct{}, cfg.maxInflight)
	var wg sync.WaitGroup
	t0 := time.Now()
	measureFrom := t0.Add(cfg.warmup)
	end := measureFrom.Add(cfg.duration)
	giveUp := end.Add(cfg.duration)
	perCall := float64(time.Second) / cfg.rate
	var start time.Time
	for n := 0; ; n++ {
		due := t0.Add(time.Duration(float64(n) * perCall))
		if !due.Before(end) {
			break
		}
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		measured := !due.Before(measureFrom)
		if measured && start.IsZero() {
			start = marks.begin()
		}
		if time.Now().After(giveUp) {
			if measured {
				t.missed.Add(1)
			}
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.call(n)
			latency := time.Since(due)
			<-slots
			if err == nil {
				t.answered.Add(1)
			}
			if !measured {
				return
			}
			if err != nil {
				t.fail(err)
			} else {
				t.hist.record(latency)
			}
		}()
	}
	// Every measured call has answered (or timed out) before the window
	// closes, so the server's CPU is charged for all of them.
	wg.Wait()
	if start.IsZero() {
		start = marks.begin()
	}
	return t, marks.end(start)
}
