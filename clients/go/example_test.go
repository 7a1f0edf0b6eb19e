package squawk_test

import (
	"context"
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
