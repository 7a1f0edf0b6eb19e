package squawk_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	squawk "github.com/squawk-dev/squawk/clients/go"
	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// With no daemon listening, DecideRetry answers from the local "default"
// profile and marks the decision.
func Example_fallback() {
	c, err := squawk.New("127.0.0.1:1") // nothing listens here
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	d, err := c.DecideRetry(context.Background(), &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d)
	fmt.Println("fallback decisions:", c.FallbackCount())
	// Output:
	// RETRY after 542ms (TRANSIENT_STATUS) [local fallback]
	// fallback decisions: 1
}

// Admit and ReportOutcome fail open: with no daemon listening, every
// dispatch is admitted, and the admission says it came without the daemon.
func ExampleClient_Admit() {
	c, err := squawk.New("127.0.0.1:1") // nothing listens here
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	a, err := c.Admit(context.Background(), &squawkv1.AdmitRequest{Upstream: "amadeus", Capability: "search_hotels"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a)
	fmt.Println("fallbacks:", c.FallbackCount())
	// Output:
	// ADMITTED (breaker CLOSED) [local fallback]
	// fallbacks: 1
}

// Run resends a failed step as the policy decides; a *StepError tells it the
// HTTP status and headers of the failure.
func ExampleRun() {
	c, err := squawk.New("127.0.0.1:1")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	calls := 0
	search := func(ctx context.Context, city string) (string, error) {
		calls++
		if calls == 1 {
			// Rate limited, but the server says to come back now.
			return "", &squawk.StepError{HTTPStatus: 429, Headers: map[string]string{"Retry-After": "0"}}
		}
		return "hotels in " + city, nil
	}
	result, err := squawk.Run(context.Background(), c, "PAR", search, squawk.RunOptions[string]{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result, "after", calls, "calls")
	// Output:
	// hotels in PAR after 2 calls
}

// Budgets are pointers, so that unset (the profile's) and zero differ:
// MaxValidationRetries: new(0) allows no correction at all. The OnError hook
// has the final say after each decision.
func ExampleRunOptions() {
	c, err := squawk.New("127.0.0.1:1") // nothing listens: the local fallback decides
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	calls := 0
	book := func(ctx context.Context, room string) (string, error) {
		calls++
		if calls == 1 {
			// Forbidden, but this upstream's 403 is known to be a blip.
			return "", &squawk.StepError{HTTPStatus: 403, Headers: map[string]string{"Retry-After": "0"}}
		}
		return "booked " + room, nil
	}
	result, err := squawk.Run(context.Background(), c, "double", book, squawk.RunOptions[string]{
		MaxAttempts:          new(2),
		MaxValidationRetries: new(0),
		Correct: func(ctx context.Context, room string, err error, d squawk.Decision) (string, error) {
			return "single", nil // never called: the budget allows no correction
		},
		OnError: func(info squawk.ErrorInfo) squawk.Tier {
			fmt.Printf("attempt %d failed: %v\n", info.Attempt, info.Decision)
			if info.Decision.Reason == squawkv1.Reason_REASON_TERMINAL_STATUS {
				return squawk.TierRetry
			}
			return squawk.TierDefault
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result, "after", calls, "calls")
	// Output:
	// attempt 1 failed: FAIL (TERMINAL_STATUS) [local fallback]
	// booked double after 2 calls
}

// A batch answers item by item; a bad item gets its own error naming its
// path, and the others still get decisions.
func ExampleClient_DecideRetryBatch() {
	c, err := squawk.New("127.0.0.1:1")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	results, err := c.DecideRetryBatch(context.Background(), &squawkv1.DecideRetryBatchRequest{
		Requests: []*squawkv1.DecideRetryRequest{
			{Attempt: 1, HttpStatus: 503},
			{Attempt: 0, HttpStatus: 503},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		var ie *squawk.InputError
		if errors.As(r.Err, &ie) {
			fmt.Println("refused:", ie.Field)
			continue
		}
		fmt.Println(r.Decision)
	}
	// Output:
	// RETRY after 542ms (TRANSIENT_STATUS) [local fallback]
	// refused: requests[1].attempt
}
