package squawk_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	squawk "github.com/squawk-dev/squawk/clients/go"
)

// completion is a step's result that tells the pod its real cost (the
// tokens the answer used) and the upstream's rate-limit headers: Run reports
// both with the success, so the pod's pacer reads the quota before the
// upstream throttles.
type completion struct {
	text   string
	tokens float64
	header http.Header
}

func (c completion) Cost() float64 { return c.tokens }

func (c completion) RateLimitHeaders() map[string]string {
	out := make(map[string]string, len(c.header))
	for name := range c.header {
		out[name] = c.header.Get(name)
	}
	return out
}

// A result implementing squawk.Coster and squawk.RateLimitHeaderer.
func ExampleRateLimitHeaderer() {
	c, err := squawk.New("127.0.0.1:1") // no daemon: Admit and the report fail open
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ask := func(ctx context.Context, prompt string) (completion, error) {
		h := http.Header{}
		h.Set("X-Ratelimit-Remaining-Tokens", "39000")
		h.Set("Content-Type", "application/json")
		return completion{text: "bonjour", tokens: 1234, header: h}, nil
	}
	answer, err := squawk.Run(context.Background(), c, "hello in French", ask,
		squawk.RunOptions[string]{Upstream: "api.openai.com", Cost: 1500})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(answer.text)
	// Output:
	// bonjour
}
