package squawk

import (
	"math"
	"sync"
	"time"
)

// A busy executor asks Admit for several permits at once and hands the
// spare ones to its next dispatches to the same (profile, upstream,
// capability) without asking again, so that it costs the daemon one Admit
// per many dispatches. The pod grants more than one while nothing limits
// the upstream (breaker closed, no cool-down, no pace); a spare permit is
// used only within the lease the pod gave it, and one that is not used
// lapses. A lease of paced starts (a Spacing above zero; this daemon grants
// none yet) has its permits start Spacing apart after the answer's Wait: a
// spare permit is never used before its start (the dispatch sleeps until
// it, as for a paced Admit's wait), nor for a step whose deadline comes
// first (that one asks the pod). The rules are those of the shared vectors,
// tests/vectors/leases.json, the same in every client.

// permitWindow is how far back Run looks to size its ask: it asks for as
// many permits as it started dispatches to the key in the last window,
// which is the pod's lease (200 ms), so that what it asks is about what it
// will use before the permits lapse.
const permitWindow = 200 * time.Millisecond

// maxLeaseKeys bounds the keys the table tracks: the names come from the
// caller's options, and a flood of them must not grow the table without
// end. A key past the bound asks for one permit, as before leases.
const maxLeaseKeys = 1024

// maxLease is the longest a spare permit is kept, whatever lease the answer
// names (the pod's is 200 ms): a spare outliving a change of the upstream's
// state would start a call the pod now refuses. The same in every client.
const maxLease = time.Second

type leaseKey struct{ profile, upstream, capability string }

// noDeadline is the time left of a step without a deadline.
const noDeadline = time.Duration(math.MaxInt64)

// grant is the spare permits of one answer, when they start and when they
// lapse.
type grant struct {
	spare int
	until time.Time
	// next is when the next spare permit may start; spacing is the time
	// between the spare permits' starts (0: each may start at once).
	next    time.Time
	spacing time.Duration
	// admission is the answer's AdmissionID, which each permit's outcome names.
	admission string
}

// permit is a spare permit taken for a dispatch.
type permit struct {
	// admission is its grant's AdmissionID.
	admission string
	// wait is how long to sleep before dispatching on it: its start.
	wait time.Duration
	// spacing is its grant's: above zero, the permit is one of a lease of
	// paced starts, whose success may wait to be reported (see
	// patientOutcomeDelay).
	spacing time.Duration
}

type leaseEntry struct {
	// lease is the spare permits of the latest grant: a later answer
	// replaces them.
	lease grant
	// Dispatches started in the current window (from windowStart) and in
	// the one before it.
	windowStart time.Time
	current     int
	previous    int
}

type leaseTable struct {
	mu      sync.Mutex
	entries map[leaseKey]*leaseEntry
}

// start counts a dispatch to key at now, with left the time before its
// step's deadline (noDeadline: none), and either takes a spare permit for
// it (spare is true: sleep p.wait, then dispatch without Admit) or says how
// many permits to ask Admit for, 1 to maxPermits. A spare permit whose
// start is not before the deadline is not taken: it stays for the next
// dispatch, and this one asks.
func (l *leaseTable) start(key leaseKey, now time.Time, left time.Duration) (p permit, spare bool, ask int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, now)
	if e == nil {
		return permit{}, false, 1
	}
	e.count(now)
	if g := &e.lease; g.live(now) {
		if wait := max(g.next.Sub(now), 0); wait < left {
			g.spare--
			g.next = g.next.Add(g.spacing)
			return permit{admission: g.admission, wait: wait, spacing: g.spacing}, true, 0
		}
	}
	return permit{}, false, min(max(e.current, e.previous, 1), maxPermits)
}

// keep stores the spare permits of an allowed answer a to key, asked at
// asked and received at answered: the lease runs from the ask (a spare is
// never used after it ends), the starts from the answer (none is used
// before its start). An answer of more than one permit with a lease
// replaces the spare permits kept; any other grant drops them, since the
// pod limits the upstream now, and so does a probe, which is for one
// dispatch. A refusal or a fail-open admission leaves them.
func (l *leaseTable) keep(key leaseKey, asked, answered time.Time, a Admission) {
	if !a.Allowed || a.Fallback {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, asked)
	if e == nil {
		return
	}
	if a.Permits <= 1 || a.Lease <= 0 || a.Probe {
		e.lease = grant{}
		return
	}
	spacing := max(a.Spacing, 0)
	e.lease = grant{
		spare:     a.Permits - 1,
		until:     asked.Add(min(a.Lease, maxLease)),
		next:      answered.Add(max(a.Wait, 0) + spacing),
		spacing:   spacing,
		admission: a.AdmissionID,
	}
}

// drop gives up key's spare permits: a dispatch to it failed, and the pod
// may refuse the next one (the Python and TypeScript clients do the same).
func (l *leaseTable) drop(key leaseKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[key]; e != nil {
		e.lease = grant{}
	}
}

// entry is key's entry, made when there is room; l.mu is held.
func (l *leaseTable) entry(key leaseKey, now time.Time) *leaseEntry {
	if e, ok := l.entries[key]; ok {
		return e
	}
	if l.entries == nil {
		l.entries = make(map[leaseKey]*leaseEntry)
	}
	if len(l.entries) >= maxLeaseKeys {
		l.sweep(now)
		if len(l.entries) >= maxLeaseKeys {
			return nil
		}
	}
	e := &leaseEntry{windowStart: now}
	l.entries[key] = e
	return e
}

// sweep drops the keys with no live permit and no dispatch in the last two
// windows; l.mu is held.
func (l *leaseTable) sweep(now time.Time) {
	for k, e := range l.entries {
		if !e.lease.live(now) && now.Sub(e.windowStart) >= 2*permitWindow {
			delete(l.entries, k)
		}
	}
}

// live says whether g has a spare permit at now.
func (g *grant) live(now time.Time) bool {
	return g.spare > 0 && now.Before(g.until)
}

// count adds a dispatch at now to the windows.
func (e *leaseEntry) count(now time.Time) {
	switch since := now.Sub(e.windowStart); {
	case since < 0:
		// A clock that went back: count into the current window.
	case since >= 2*permitWindow:
		e.previous, e.current, e.windowStart = 0, 0, now
	case since >= permitWindow:
		e.previous, e.current, e.windowStart = e.current, 0, e.windowStart.Add(permitWindow)
	}
	e.current++
}
