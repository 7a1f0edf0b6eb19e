package squawk

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

var criticalityHeaderVectorPath = filepath.Join(repoRoot, "tests", "vectors", "criticality_header.json")

type criticalityHeaderVectors struct {
	Read []struct {
		Name    string              `json:"name"`
		Headers map[string][]string `json:"headers"`
		Level   *string             `json:"level"`
	} `json:"read"`
	Write []struct {
		Name    string            `json:"name"`
		Level   *string           `json:"level"`
		Headers map[string]string `json:"headers"`
		Sent    *string           `json:"sent"`
	} `json:"write"`
}

func loadCriticalityHeaderVectors(t *testing.T) *criticalityHeaderVectors {
	t.Helper()
	raw, err := os.ReadFile(criticalityHeaderVectorPath)
	if err != nil {
		t.Fatalf("read the shared vectors: %v", err)
	}
	var v criticalityHeaderVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("parse %s: %v", criticalityHeaderVectorPath, err)
	}
	if len(v.Read) == 0 || len(v.Write) == 0 {
		t.Fatalf("%s has no read or write cases", criticalityHeaderVectorPath)
	}
	return &v
}

// vectorLevel is the Criticality a case names without its prefix; null is
// CRITICALITY_UNSPECIFIED.
func vectorLevel(t *testing.T, name *string) squawkv1.Criticality {
	t.Helper()
	if name == nil {
		return squawkv1.Criticality_CRITICALITY_UNSPECIFIED
	}
	v, ok := squawkv1.Criticality_value["CRITICALITY_"+*name]
	if !ok || v == 0 {
		t.Fatalf("the vectors name an unknown level %q", *name)
	}
	return squawkv1.Criticality(v)
}

// Every "read" case of tests/vectors/criticality_header.json, through
// CriticalityFromHeader on a header built as a received request's is.
func TestCriticalityFromHeaderVectors(t *testing.T) {
	for _, tc := range loadCriticalityHeaderVectors(t).Read {
		t.Run(tc.Name, func(t *testing.T) {
			h := http.Header{}
			for name, values := range tc.Headers {
				for _, v := range values {
					h.Add(name, v)
				}
			}
			if got, want := CriticalityFromHeader(h), vectorLevel(t, tc.Level); got != want {
				t.Errorf("CriticalityFromHeader(%v) = %v, want %v", h, got, want)
			}
		})
	}
}

// Every "write" case of tests/vectors/criticality_header.json: a request
// sent through the RoundTripper inside a step whose level is the case's
// reaches a loopback server with the case's header.
func TestRoundTripperCriticalityHeaderVectors(t *testing.T) {
	const admitted = `{"allowed": true, "reason": "REASON_ADMITTED", "permits": 1}`
	for _, tc := range loadCriticalityHeaderVectors(t).Write {
		t.Run(tc.Name, func(t *testing.T) {
			var mu sync.Mutex
			var received [][]string
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				received = append(received, r.Header.Values(criticalityHeader))
				mu.Unlock()
				_, _ = w.Write([]byte("ok"))
			}))
			t.Cleanup(api.Close)
			c, _ := scriptedClient(t, admitted)
			rt := NewRoundTripper(c, "api", nil)
			level := vectorLevel(t, tc.Level)

			var sent *http.Request
			call := func(ctx context.Context, _ int) (int, error) {
				if got := CriticalityFrom(ctx); got != level {
					t.Errorf("the step's ctx carries %v, want %v", got, level)
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
				if err != nil {
					return 0, err
				}
				for name, v := range tc.Headers {
					req.Header.Add(name, v)
				}
				sent = req
				before := req.Header.Clone()
				resp, err := (&http.Client{Transport: rt}).Do(req)
				if err != nil {
					return 0, err
				}
				_ = resp.Body.Close()
				if len(req.Header) != len(before) || req.Header.Get(criticalityHeader) != before.Get(criticalityHeader) {
					t.Errorf("the caller's request headers changed from %v to %v", before, req.Header)
				}
				return resp.StatusCode, nil
			}
			// A step without an upstream asks no Admit; its level rides the
			// ctx the request is made with.
			status, err := Run(context.Background(), c, 0, call, RunOptions[int]{Criticality: level})
			if err != nil || status != 200 || sent == nil {
				t.Fatalf("the request ended with HTTP %d, %v; want 200", status, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(received) != 1 {
				t.Fatalf("the server saw %d requests, want 1", len(received))
			}
			got := received[0]
			switch {
			case tc.Sent == nil && len(got) != 0:
				t.Errorf("the request carried %s: %q, want no such header", criticalityHeader, got)
			case tc.Sent != nil && (len(got) != 1 || got[0] != *tc.Sent):
				t.Errorf("the request carried %s: %q, want %q", criticalityHeader, got, *tc.Sent)
			}
		})
	}
}
