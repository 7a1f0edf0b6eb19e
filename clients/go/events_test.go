package squawk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// eventsDaemon is a daemon of its own serving the built-in policy, so that
// its event history holds this test's events alone.
func eventsDaemon(t *testing.T) *Client {
	t.Helper()
	d, err := startDaemon(mustFreeAddr(t))
	if err != nil {
		t.Fatalf("cannot run the Squawk daemon: %v", err)
	}
	t.Cleanup(d.stop)
	return newClient(t, d.addr, WithFallbackDisabled(), WithCallTimeout(10*time.Second))
}

// throttled reports a 429 with Retry-After: 30 for each upstream, which
// begins a cool-down (one event) for each.
func throttled(t *testing.T, c *Client, upstreams ...string) {
	t.Helper()
	var outcomes []*squawkv1.Outcome
	for _, u := range upstreams {
		outcomes = append(outcomes, &squawkv1.Outcome{Upstream: u, HttpStatus: 429, Headers: map[string]string{"retry-after": "30"}})
	}
	n, err := c.ReportOutcome(context.Background(), &squawkv1.ReportOutcomeRequest{Outcomes: outcomes})
	if err != nil || n != len(outcomes) {
		t.Fatalf("ReportOutcome = %d, %v; want %d recorded", n, err, len(outcomes))
	}
}

func TestGetEvents(t *testing.T) {
	c := eventsDaemon(t)
	ctx := context.Background()

	t.Run("a cool-down begun", func(t *testing.T) {
		reported := time.Now()
		throttled(t, c, "go-events")
		resp, err := c.GetEvents(ctx, &squawkv1.GetEventsRequest{Upstream: "go-events"})
		if err != nil {
			t.Fatalf("GetEvents: %v", err)
		}
		if len(resp.GetEvents()) != 1 {
			t.Fatalf("GetEvents(go-events) = %v, want one event", resp.GetEvents())
		}
		e := resp.GetEvents()[0]
		if e.GetKind() != squawkv1.EventKind_EVENT_KIND_COOL_DOWN || e.GetProfile() != "default" || e.GetUpstream() != "go-events" ||
			e.GetBefore() != "" || e.GetAfter() != "cooling for 30 s" || e.GetCause() != "HTTP 429 (throttled), Retry-After 30 s" {
			t.Errorf("the cool-down's event = %v", e)
		}
		if e.GetNumber() < 1 || resp.GetNextAfter() < e.GetNumber() || resp.GetLost() != 0 {
			t.Errorf("event number %d, next_after %d, lost %d", e.GetNumber(), resp.GetNextAfter(), resp.GetLost())
		}
		if at := e.GetTime().AsTime(); at.Before(reported.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
			t.Errorf("event time %v, want about %v", at, reported)
		}
		if ahead := e.GetUntil().AsTime().Sub(reported); ahead < 29*time.Second || ahead > 31*time.Second {
			t.Errorf("until is %v after the report, want about 30 s", ahead)
		}
		// A nil request is an empty one: every event from the oldest.
		all, err := c.GetEvents(ctx, nil)
		if err != nil {
			t.Fatalf("GetEvents(nil): %v", err)
		}
		found := 0
		for _, got := range all.GetEvents() {
			if got.GetNumber() == e.GetNumber() {
				found++
			}
		}
		if found != 1 {
			t.Errorf("GetEvents(nil) = %v, want the cool-down's event among them", all.GetEvents())
		}
	})

	t.Run("pages of one", func(t *testing.T) {
		var names []string
		for i := range 5 {
			names = append(names, fmt.Sprintf("go-events-%d", i))
		}
		throttled(t, c, names...)
		whole, err := c.GetEvents(ctx, &squawkv1.GetEventsRequest{PageSize: 500})
		if err != nil {
			t.Fatalf("GetEvents: %v", err)
		}
		if len(whole.GetEvents()) < 6 {
			t.Fatalf("GetEvents = %d events, want at least the 6 cool-downs", len(whole.GetEvents()))
		}
		var numbers []int64
		after := int64(0)
		for range len(whole.GetEvents()) + 2 {
			page, err := c.GetEvents(ctx, &squawkv1.GetEventsRequest{After: after, PageSize: 1})
			if err != nil {
				t.Fatalf("GetEvents after %d: %v", after, err)
			}
			if page.GetLost() != 0 {
				t.Errorf("GetEvents after %d lost %d", after, page.GetLost())
			}
			if len(page.GetEvents()) == 0 {
				if page.GetNextAfter() != after {
					t.Errorf("an empty page after %d has next_after %d, want %d", after, page.GetNextAfter(), after)
				}
				break
			}
			if len(page.GetEvents()) > 1 {
				t.Fatalf("a page of 1 after %d has %d events", after, len(page.GetEvents()))
			}
			n := page.GetEvents()[0].GetNumber()
			if n <= after || page.GetNextAfter() != n {
				t.Fatalf("after %d: event %d, next_after %d", after, n, page.GetNextAfter())
			}
			numbers = append(numbers, n)
			after = page.GetNextAfter()
		}
		if len(numbers) != len(whole.GetEvents()) {
			t.Fatalf("pages of one visited %v, want the %d events of one page", numbers, len(whole.GetEvents()))
		}
		for i, e := range whole.GetEvents() {
			if numbers[i] != e.GetNumber() {
				t.Errorf("pages of one visited %v, want the numbers of one page in order", numbers)
				break
			}
		}
		// Filtered by name, a page of one skips the other names' numbers.
		page, err := c.GetEvents(ctx, &squawkv1.GetEventsRequest{Upstream: names[3], PageSize: 1})
		if err != nil {
			t.Fatalf("GetEvents(%s): %v", names[3], err)
		}
		if len(page.GetEvents()) != 1 || page.GetEvents()[0].GetUpstream() != names[3] || page.GetNextAfter() != page.GetEvents()[0].GetNumber() {
			t.Errorf("GetEvents(%s) = %v", names[3], page)
		}
	})

	t.Run("a negative after", func(t *testing.T) {
		_, err := c.GetEvents(ctx, &squawkv1.GetEventsRequest{After: -1})
		if code := status.Code(err); code != codes.InvalidArgument {
			t.Fatalf("GetEvents(after -1): %v, want INVALID_ARGUMENT", err)
		}
		wantInputError(t, err, "after")
		// The daemon's own status, as the *InputError keeps it (status.Convert
		// of the wrapped error would prefix "squawk: GetEvents: ").
		var ie *InputError
		if errors.As(err, &ie) {
			if msg := ie.GRPCStatus().Message(); !strings.HasPrefix(msg, "after:") {
				t.Errorf("GetEvents(after -1) message %q, want it to start with \"after:\"", msg)
			}
		}
	})

}

func TestGetEventsHasNoFallback(t *testing.T) {
	c := deadClient(t)
	if _, err := c.GetEvents(context.Background(), &squawkv1.GetEventsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetEvents without a daemon: %v, want UNAVAILABLE", err)
	}
	if c.FallbackCount() != 0 {
		t.Errorf("FallbackCount = %d after GetEvents, want 0", c.FallbackCount())
	}
}
