package squawk

import (
	"sync"
	"time"
)

// A busy executor asks Admit for several permits at once and hands the
// spare ones to its next dispatches to the same (profile, upstream,
// capability) without asking again, so that it costs the daemon one Admit
// per many dispatches. The pod grants more than one only when nothing
// limits the upstream (breaker closed, no cool-down, no pace), so a spare
// permit is always a start now; it is used only within the lease the pod
// gave it, and one that is not used lapses.

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

// grant is the spare permits of one answer and when they lapse.
type grant struct {
	spare int
	until time.Time
	// admission is the answer's AdmissionID, which each permit's outcome names.
	admission string
}

type leaseEntry struct {
	grants []grant // in the order granted
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

// start counts a dispatch to key at now and either takes a spare permit for
// it (spare is true: dispatch now, without Admit) or says how many permits
// to ask Admit for, 1 to maxPermits.
func (l *leaseTable) start(key leaseKey, now time.Time) (spare bool, admission string, ask int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, now)
	if e == nil {
		return false, "", 1
	}
	e.count(now)
	for len(e.grants) > 0 {
		g := &e.grants[0]
		if g.spare > 0 && now.Before(g.until) {
			g.spare--
			return true, g.admission, 0
		}
		e.grants = e.grants[1:]
	}
	return false, "", min(max(e.current, e.previous, 1), maxPermits)
}

// keep stores the spare permits of an allowed answer a, received at now,
// to key. Only a grant to start now has spares: a paced start or a probe
// is for one dispatch.
func (l *leaseTable) keep(key leaseKey, now time.Time, a Admission) {
	if !a.Allowed || a.Permits <= 1 || a.Lease <= 0 || a.Wait > 0 || a.Probe {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entry(key, now); e != nil {
		e.grants = append(e.grants, grant{spare: a.Permits - 1, until: now.Add(min(a.Lease, maxLease)),
			admission: a.AdmissionID})
	}
}

// drop gives up key's spare permits: a dispatch to it failed, and the pod
// may refuse the next one (the Python and TypeScript clients do the same).
func (l *leaseTable) drop(key leaseKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[key]; e != nil {
		e.grants = nil
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
		live := false
		for _, g := range e.grants {
			live = live || (g.spare > 0 && now.Before(g.until))
		}
		if !live && now.Sub(e.windowStart) >= 2*permitWindow {
			delete(l.entries, k)
		}
	}
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
