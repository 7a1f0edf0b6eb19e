// An executor step in Go: search hotels, with Squawk deciding the retries.
//
//	cd examples/go
//	SQUAWK_ADDRESS=127.0.0.1:50051 UPSTREAM_URL=http://127.0.0.1:8080/search go run . PARIS
//
// The step is one HTTP call. squawk.Run runs it and, after each failure,
// asks the daemon what to do (DecideRetry): resend after a delay (a 503),
// correct the parameters (a 400), or stop. With Upstream set it also asks
// the pod before each call (Admit) and reports each success
// (ReportOutcome), so every executor of the pod shares one breaker, retry
// budget and pace for the hotel API. When the daemon cannot be reached, the
// client decides alone, from the same rules (the local fallback); only
// corrections need it.
//
// Prints what the correction changed and the hotels found, or why the step
// failed (exit status 1). See examples/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	squawk "github.com/squawk-dev/squawk/clients/go"
	"github.com/squawk-dev/squawk/clients/go/squawkv1"
	"google.golang.org/protobuf/types/known/structpb"
)

// SearchParams are the step's parameters: what a correction may change.
type SearchParams struct {
	CityCode string `json:"city_code"`
	Nights   int    `json:"nights"`
}

// SearchResult is the upstream's answer to a successful search.
type SearchResult struct {
	CityCode string `json:"city_code"`
	Hotels   []struct {
		Name string `json:"name"`
	} `json:"hotels"`
}

// schema is the capability's input schema, as the executor already knows it
// (a tool schema). AnalyzeError suggests only values that satisfy it.
var schema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"city_code": map[string]any{"type": "string", "pattern": "^[A-Z]{3}$"},
		"nights":    map[string]any{"type": "integer", "minimum": 1},
	},
	"required": []any{"city_code"},
}

// searchHotels is the step: one call to the upstream. A failed HTTP answer
// is returned as a *squawk.StepError carrying its status, body and headers
// (Retry-After), which the policy reads; any other error counts as a
// transport failure.
func searchHotels(upstream string) func(context.Context, SearchParams) (SearchResult, error) {
	return func(ctx context.Context, p SearchParams) (SearchResult, error) {
		var found SearchResult
		query := url.Values{"city_code": {p.CityCode}, "nights": {strconv.Itoa(p.Nights)}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, upstream+"?"+query.Encode(), nil)
		if err != nil {
			return found, err
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return found, err // no HTTP answer: a transport failure
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return found, err
		}
		if res.StatusCode >= 400 {
			headers := map[string]string{}
			for name := range res.Header {
				headers[name] = res.Header.Get(name)
			}
			return found, &squawk.StepError{HTTPStatus: res.StatusCode, Body: body, Headers: headers}
		}
		return found, json.Unmarshal(body, &found)
	}
}

// corrector is the correction hook, called when the policy answers CORRECT
// (a 4xx that fixed parameters may cure): it asks AnalyzeError for a fix and
// merges its suggested_changes (only the changed keys) into the parameters.
// An error it returns ends the run with a *squawk.RunError whose Cause it is.
func corrector(c *squawk.Client) func(context.Context, SearchParams, error, squawk.Decision) (SearchParams, error) {
	return func(ctx context.Context, p SearchParams, err error, _ squawk.Decision) (SearchParams, error) {
		var failed *squawk.StepError
		if !errors.As(err, &failed) {
			return p, err // CORRECT follows an HTTP answer: not reached
		}
		params, err := asMap(p)
		if err != nil {
			return p, err
		}
		original, err := structpb.NewStruct(params)
		if err != nil {
			return p, err
		}
		schemaStruct, err := structpb.NewStruct(schema)
		if err != nil {
			return p, err
		}
		answer, err := c.AnalyzeError(ctx, &squawkv1.AnalyzeErrorRequest{
			HttpStatus:      int32(failed.HTTPStatus),
			ErrorResponse:   string(failed.Body),
			OriginalRequest: original,
			ParameterSchema: schemaStruct,
			CapabilityName:  "search_hotels",
		})
		if err != nil {
			return p, err
		}
		if !answer.GetShouldRetry() {
			return p, errors.New(answer.GetReason())
		}
		changes := answer.GetSuggestedChanges().AsMap()
		shown, _ := json.Marshal(changes)
		fmt.Printf("correction: %s (%s)\n", shown, answer.GetReason())
		for name, value := range changes {
			params[name] = value
		}
		return fromMap(params)
	}
}

// asMap and fromMap convert the parameters to and from the JSON object a
// google.protobuf.Struct holds.
func asMap(p SearchParams) (map[string]any, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(data, &m)
}

func fromMap(m map[string]any) (SearchParams, error) {
	var p SearchParams
	data, err := json.Marshal(m)
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal(data, &p)
}

func run() int {
	city := "PARIS"
	if len(os.Args) > 1 {
		city = os.Args[1]
	}
	upstream := envOr("UPSTREAM_URL", "http://127.0.0.1:8080/search")

	// The daemon is a sidecar on loopback: it answers in about a millisecond.
	// A call it has not answered within the call timeout (50 ms by default)
	// is decided by the local fallback instead, so a wedged daemon never
	// stalls a step; 1 s here, so that a first call on a busy machine still
	// reaches it.
	c, err := squawk.New(envOr("SQUAWK_ADDRESS", "127.0.0.1:50051"), squawk.WithCallTimeout(time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// Close the client before exiting: it sends the outcomes still queued.
	defer c.Close()

	// The step's deadline: no retry is made whose wait would pass it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	found, err := squawk.Run(ctx, c, SearchParams{CityCode: city, Nights: 2}, searchHotels(upstream),
		squawk.RunOptions[SearchParams]{
			Capability: "search_hotels",
			Upstream:   "hotel-api",
			Correct:    corrector(c),
		})
	var runErr *squawk.RunError
	switch {
	case errors.As(err, &runErr) && runErr.Cause != nil:
		// The run stopped for another reason than the policy: here, the
		// correction hook found no safe change.
		fmt.Println("step stopped:", runErr.Cause)
		return 1
	case errors.As(err, &runErr):
		// The policy ended the step: Decision says why, Err is the step's
		// last error.
		d := runErr.Decision
		fmt.Printf("step failed: RunError: %s after %d calls: %s (last error: %v)\n",
			d.Reason, runErr.Calls, d.Explanation, runErr.Err)
		return 1
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	names := make([]string, len(found.Hotels))
	for i, hotel := range found.Hotels {
		names[i] = hotel.Name
	}
	fmt.Printf("%d hotels in %s: %s\n", len(found.Hotels), found.CityCode, strings.Join(names, ", "))
	return 0
}

func envOr(name, otherwise string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return otherwise
}

func main() {
	os.Exit(run())
}
