package squawk

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// pagedNames are more upstreams than two of the daemon's pages of 1,000;
// every 250th is reported under the llm profile.
func pagedNames() (all []string, llm map[string]bool) {
	llm = map[string]bool{}
	for i := range 2500 {
		name := fmt.Sprintf("paged-%04d", i)
		all = append(all, name)
		if i%250 == 0 {
			llm[name] = true
		}
	}
	return all, llm
}

// pagedDaemon is a daemon of its own (the shared ones' registries are other
// tests'), tracking pagedNames, reported 1,000 a call (ReportOutcome's limit).
func pagedDaemon(t *testing.T) *Client {
	t.Helper()
	d, err := startDaemon(mustFreeAddr(t))
	if err != nil {
		t.Fatalf("cannot run the Squawk daemon: %v", err)
	}
	t.Cleanup(d.stop)
	c := newClient(t, d.addr, WithFallbackDisabled(), WithCallTimeout(10*time.Second))
	all, llm := pagedNames()
	var outcomes []*squawkv1.Outcome
	for _, name := range all {
		o := &squawkv1.Outcome{Upstream: name, Success: true}
		if llm[name] {
			o.Profile = "llm"
		}
		outcomes = append(outcomes, o)
	}
	for start := 0; start < len(outcomes); start += maxOutcomes {
		batch := outcomes[start:min(start+maxOutcomes, len(outcomes))]
		n, err := c.ReportOutcome(context.Background(), &squawkv1.ReportOutcomeRequest{Outcomes: batch})
		if err != nil || n != len(batch) {
			t.Fatalf("ReportOutcome = %d, %v; want %d recorded", n, err, len(batch))
		}
	}
	return c
}

// pagedCounts counts each listed pagedNames name, by profile/name.
func pagedCounts(states []*squawkv1.UpstreamState) map[string]int {
	counts := map[string]int{}
	for _, s := range states {
		if strings.HasPrefix(s.GetUpstream(), "paged-") {
			counts[s.GetProfile()+"/"+s.GetUpstream()]++
		}
	}
	return counts
}

func TestGetUpstreamsReadsEveryPageOnce(t *testing.T) {
	c := pagedDaemon(t)
	ctx := context.Background()
	all, llm := pagedNames()
	want := map[string]int{}
	wantLLM := map[string]int{}
	for _, name := range all {
		if llm[name] {
			want["llm/"+name], wantLLM["llm/"+name] = 1, 1
		} else {
			want["default/"+name] = 1
		}
	}
	cases := []struct {
		name string
		req  *squawkv1.GetUpstreamsRequest
		want map[string]int
	}{
		{"every upstream", &squawkv1.GetUpstreamsRequest{}, want},
		{"pages of 300", &squawkv1.GetUpstreamsRequest{PageSize: 300}, want},
		{"one profile", &squawkv1.GetUpstreamsRequest{Profile: "llm"}, wantLLM},
		{"one name", &squawkv1.GetUpstreamsRequest{Upstream: all[1234]}, map[string]int{"default/" + all[1234]: 1}},
		{"a name of another profile", &squawkv1.GetUpstreamsRequest{Profile: "llm", Upstream: all[1234]}, map[string]int{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			states, err := c.GetUpstreams(ctx, tc.req)
			if err != nil {
				t.Fatalf("GetUpstreams: %v", err)
			}
			got := pagedCounts(states)
			if len(got) != len(tc.want) {
				t.Errorf("GetUpstreams listed %d of the names, want %d", len(got), len(tc.want))
			}
			for key, n := range got {
				if n != tc.want[key] {
					t.Errorf("GetUpstreams listed %s %d times, want %d", key, n, tc.want[key])
				}
			}
			if tc.req.GetPageToken() != "" {
				t.Errorf("GetUpstreams changed the caller's request: page_token %q", tc.req.GetPageToken())
			}
		})
	}
}

func TestGetUpstreamsPageAnswersOnePage(t *testing.T) {
	c := pagedDaemon(t)
	ctx := context.Background()
	first, err := c.GetUpstreamsPage(ctx, &squawkv1.GetUpstreamsRequest{})
	if err != nil {
		t.Fatalf("GetUpstreamsPage: %v", err)
	}
	if len(first.GetUpstreams()) != 1000 || !first.GetTruncated() || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %d upstreams, truncated %v, token %q; want 1000, true and a token",
			len(first.GetUpstreams()), first.GetTruncated(), first.GetNextPageToken())
	}
	next, err := c.GetUpstreamsPage(ctx, &squawkv1.GetUpstreamsRequest{PageToken: first.GetNextPageToken()})
	if err != nil {
		t.Fatalf("GetUpstreamsPage: %v", err)
	}
	seen := pagedCounts(first.GetUpstreams())
	for key := range pagedCounts(next.GetUpstreams()) {
		if seen[key] > 0 {
			t.Errorf("%s is on both pages", key)
		}
	}
	if _, err := c.GetUpstreamsPage(ctx, nil); err == nil {
		t.Error("GetUpstreamsPage(nil) succeeded, want an *InputError")
	}
}

// endlessPages is a misbehaving server: every page says another follows.
type endlessPages struct {
	squawkv1.UnimplementedPolicyServiceServer
	mu       sync.Mutex
	requests []*squawkv1.GetUpstreamsRequest
}

func (e *endlessPages) GetUpstreams(_ context.Context, req *squawkv1.GetUpstreamsRequest) (*squawkv1.GetUpstreamsResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests = append(e.requests, req)
	return &squawkv1.GetUpstreamsResponse{
		Upstreams:     []*squawkv1.UpstreamState{{Profile: "default", Upstream: "again"}},
		Truncated:     true,
		NextPageToken: "again",
	}, nil
}

func TestGetUpstreamsStopsAtThePageBound(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endlessPages{}
	srv := grpc.NewServer()
	squawkv1.RegisterPolicyServiceServer(srv, e)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	c := newClient(t, l.Addr().String(), WithFallbackDisabled())

	req := &squawkv1.GetUpstreamsRequest{Profile: "llm", Upstream: "u", IncludeFleet: true}
	states, err := c.GetUpstreams(context.Background(), req)
	if status.Code(err) != codes.Aborted || states != nil {
		t.Fatalf("GetUpstreams of an endless listing = %d states, %v; want none and ABORTED", len(states), err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.requests) != maxUpstreamPages {
		t.Errorf("GetUpstreams asked for %d pages, want the bound of %d", len(e.requests), maxUpstreamPages)
	}
	for i, r := range e.requests {
		if r.GetProfile() != "llm" || r.GetUpstream() != "u" || !r.GetIncludeFleet() {
			t.Errorf("page %d was asked for profile %q, upstream %q, include_fleet %v; want the request's on every page",
				i, r.GetProfile(), r.GetUpstream(), r.GetIncludeFleet())
		}
	}
}
