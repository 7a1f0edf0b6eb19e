//go:build conformance

package squawk

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The Go testee of the fallback conformance runner (tests/test_fallback_conformance.py):
// built with `go test -c -tags conformance` (so a plain `go test` has no
// test here to skip) and run with -test.run=TestFallbackTestee, it reads
// one case per line on stdin,
//
//	{"name": ..., "now": <Unix seconds>, "env": {...}, "request": <DecideRetryRequest JSON>}
//
// and writes one answer per line on stdout: {"name", "response"} (proto3
// JSON), {"name", "error": {"field"}} for a refused input, or {"name",
// "crash"}. It decides as the client's fallback does: the profile from the
// case's environment, the clock at the case's instant.
func TestFallbackTestee(t *testing.T) {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<16), 8<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if err := out.Encode(answerCase(in.Bytes())); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
}

type testeeCase struct {
	Name    string            `json:"name"`
	Now     float64           `json:"now"`
	Env     map[string]string `json:"env"`
	Request json.RawMessage   `json:"request"`
}

func answerCase(line []byte) map[string]any {
	var c testeeCase
	if err := json.Unmarshal(line, &c); err != nil {
		return map[string]any{"crash": fmt.Sprintf("not a case: %v", err)}
	}
	answer := map[string]any{"name": c.Name}
	req := &squawkv1.DecideRetryRequest{}
	if err := protojson.Unmarshal(c.Request, req); err != nil {
		answer["crash"] = fmt.Sprintf("request is not proto3 JSON: %v", err)
		return answer
	}
	profile, _ := profileFromEnv(func(name string) (string, bool) {
		v, ok := c.Env[name]
		return v, ok
	})
	sec, frac := math.Modf(c.Now)
	d, err := decideLocal(req, profile, time.Unix(int64(sec), int64(frac*1e9)))
	var bad *InputError
	switch {
	case errors.As(err, &bad):
		answer["error"] = map[string]string{"field": bad.Field}
	case err != nil:
		answer["crash"] = err.Error()
	default:
		raw, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(d.Proto())
		if err != nil {
			answer["crash"] = err.Error()
		} else {
			answer["response"] = json.RawMessage(raw)
		}
	}
	return answer
}
