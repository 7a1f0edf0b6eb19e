package squawk

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The spare permits' shared vectors; their cases are never copied here.
var leaseVectorPath = filepath.Join(repoRoot, "tests", "vectors", "leases.json")

type leaseFile struct {
	About string      `json:"about"`
	Cases []leaseCase `json:"cases"`
}

type leaseCase struct {
	Name   string       `json:"name"`
	Events []leaseEvent `json:"events"`
}

// leaseEvent is one of a grant, a take (with its expect) or a revoke, at
// At ms on the fake clock.
type leaseEvent struct {
	At    int64 `json:"at"`
	Grant *struct {
		Permits     int    `json:"permits"`
		LeaseMs     int64  `json:"leaseMs"`
		WaitMs      int64  `json:"waitMs"`
		SpacingMs   int64  `json:"spacingMs"`
		AdmissionID string `json:"admissionId"`
	} `json:"grant"`
	Take *struct {
		DeadlineMs *int64 `json:"deadlineMs"`
	} `json:"take"`
	// Expect is the take's permit, or null for none: raw, so that a
	// missing expect is told from a null one.
	Expect json.RawMessage `json:"expect"`
	Revoke bool            `json:"revoke"`
}

type leaseExpect struct {
	AdmissionID string `json:"admissionId"`
	WaitMs      int64  `json:"waitMs"`
}

func loadLeaseVectors(t *testing.T) []leaseCase {
	t.Helper()
	raw, err := os.ReadFile(leaseVectorPath)
	if err != nil {
		t.Fatalf("read the lease vectors: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a key this test does not know would go unchecked
	var f leaseFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("parse %s: %v", leaseVectorPath, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s has no cases", leaseVectorPath)
	}
	return f.Cases
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// Every case of tests/vectors/leases.json, through the lease table on a
// fake clock: grants as Run keeps an allowed answer (asked and answered at
// the event's time), takes as Run starts a dispatch, revokes as a failed
// dispatch drops the spares.
func TestLeaseVectors(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := leaseKey{profile: "default", upstream: "api.example"}
	for _, tc := range loadLeaseVectors(t) {
		t.Run(tc.Name, func(t *testing.T) {
			var l leaseTable
			for i, ev := range tc.Events {
				now := t0.Add(ms(ev.At))
				switch {
				case ev.Grant != nil:
					g := ev.Grant
					l.keep(key, now, now, Admission{Allowed: true, Permits: g.Permits, Lease: ms(g.LeaseMs),
						Wait: ms(g.WaitMs), Spacing: ms(g.SpacingMs), AdmissionID: g.AdmissionID})
				case ev.Revoke:
					l.drop(key)
				case ev.Take != nil:
					left := noDeadline
					if d := ev.Take.DeadlineMs; d != nil {
						left = ms(*d)
					}
					p, spare, _ := l.start(key, now, left)
					if len(ev.Expect) == 0 {
						t.Fatalf("event %d: a take without expect", i)
					}
					var want *leaseExpect
					if err := json.Unmarshal(ev.Expect, &want); err != nil {
						t.Fatalf("event %d: expect: %v", i, err)
					}
					switch {
					case want == nil && spare:
						t.Errorf("event %d at %d ms: took %+v, want none", i, ev.At, p)
					case want != nil && !spare:
						t.Errorf("event %d at %d ms: took none, want %+v", i, ev.At, *want)
					case want != nil && (p.admission != want.AdmissionID || p.wait != ms(want.WaitMs)):
						t.Errorf("event %d at %d ms: took %s after %v, want %s after %v",
							i, ev.At, p.admission, p.wait, want.AdmissionID, ms(want.WaitMs))
					}
				default:
					t.Fatalf("event %d: neither a grant, a take nor a revoke", i)
				}
			}
		})
	}
}
