package squawk

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
)

// Client-side throttling's shared vectors; their cases are never copied here.
var throttleVectorPath = filepath.Join(repoRoot, "tests", "vectors", "throttle.json")

type throttleFile struct {
	About string         `json:"about"`
	Cases []throttleCase `json:"cases"`
}

type throttleCase struct {
	Name   string          `json:"name"`
	Events []throttleEvent `json:"events"`
}

// throttleEvent is a call to Method asked at At ms on the fake clock with
// the random Draw, Repeat times (once when absent); Sent says whether the
// client sends it, End how a sent call ends, at the same At (a sent call
// without one stays in flight). With Ended set, it is instead the end of
// that many of Method's calls in flight, each with End.
type throttleEvent struct {
	At     int64   `json:"at"`
	Method string  `json:"method"`
	Draw   float64 `json:"draw"`
	Sent   bool    `json:"sent"`
	End    string  `json:"end"`
	Repeat int     `json:"repeat"`
	Ended  *int    `json:"ended"`
}

func loadThrottleVectors(t *testing.T) []throttleCase {
	t.Helper()
	raw, err := os.ReadFile(throttleVectorPath)
	if err != nil {
		t.Fatalf("read the throttle vectors: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a key this test does not know would go unchecked
	var f throttleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("parse %s: %v", throttleVectorPath, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("%s has no cases", throttleVectorPath)
	}
	return f.Cases
}

// Every case of tests/vectors/throttle.json, through the client's own
// throttle (a window for each PolicyService method) on a fake clock.
func TestThrottleVectors(t *testing.T) {
	for _, tc := range loadThrottleVectors(t) {
		t.Run(tc.Name, func(t *testing.T) {
			th := newServiceThrottle()
			inFlight := map[string]int{}
			for i, ev := range tc.Events {
				if _, known := th.windows[ev.Method]; !known {
					t.Fatalf("event %d: %q is no PolicyService method", i, ev.Method)
				}
				if ev.Ended != nil {
					if inFlight[ev.Method] < *ev.Ended {
						t.Fatalf("event %d: ends %d calls of %d in flight", i, *ev.Ended, inFlight[ev.Method])
					}
					inFlight[ev.Method] -= *ev.Ended
					for range *ev.Ended {
						th.ended(ev.Method, ev.At, mustCode(t, ev.End))
					}
					continue
				}
				if !ev.Sent && ev.End != "" {
					t.Fatalf("event %d: only a sent call has an end", i)
				}
				n := max(ev.Repeat, 1)
				for k := range n {
					sent, requests, accepts := th.allow(ev.Method, ev.At, ev.Draw)
					if sent != ev.Sent {
						t.Fatalf("event %d (call %d of %d) at %d ms, draw %v: sent %v, want %v (window before it: %d requests, %d accepts)",
							i, k+1, n, ev.At, ev.Draw, sent, ev.Sent, requests, accepts)
					}
					switch {
					case sent && ev.End != "":
						th.ended(ev.Method, ev.At, mustCode(t, ev.End))
					case sent:
						inFlight[ev.Method]++
					}
				}
			}
		})
	}
}

// The window's edges and the counts allow reports, beyond the vectors.
func TestThrottleCounts(t *testing.T) {
	th := newThrottle("M")
	for range 30 {
		th.allow("M", 999, 0.999)
		th.ended("M", 999, codes.Unavailable) // answered
	}
	if ok, r, a := th.allow("M", 9999, 0); !ok || r != 30 || a != 30 {
		t.Fatalf("at 9999 ms: %v, %d requests, %d accepts; want sent, 30, 30", ok, r, a)
	}
	// Second 10 drops second 0; the call asked at 9999 ms is still in
	// flight, so nothing is left.
	if ok, r, a := th.allow("M", 10000, 0); !ok || r != 0 || a != 0 {
		t.Fatalf("at 10000 ms: %v, %d requests, %d accepts; want sent, 0, 0", ok, r, a)
	}
	// A method the throttle does not know is sent and never counted.
	for range 50 {
		if ok, _, _ := th.allow("Other", 0, 0); !ok {
			t.Fatal("an unknown method was refused")
		}
	}
	if n := len(th.windows); n != 1 {
		t.Fatalf("%d windows, want 1", n)
	}
}
