package squawk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The one shared conformance vector file; its cases are never copied here.
var vectorPath = filepath.Join(repoRoot, "tests", "vectors", "decisions.json")

type vectorFile struct {
	About     string          `json:"about"`
	Classify  []vectorCase    `json:"classify"`
	Redaction []redactionCase `json:"redaction"`
	Decide    []vectorCase    `json:"decide"`
	Invalid   []invalidCase   `json:"invalid"`
}

type vectorCase struct {
	Name    string          `json:"name"`
	Request json.RawMessage `json:"request"`
	Expect  json.RawMessage `json:"expect"`
	// Live, when set, is the answer at the real clock (the daemon's, and
	// the client's when it falls back), later than every date in the case.
	Live json.RawMessage `json:"live"`
}

// liveExpect is what is answered at the real clock: Live when the case has
// it, else want.
func (c vectorCase) liveExpect(want json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(c.Live)) > 0 {
		return c.Live
	}
	return want
}

type redactionCase struct {
	Name     string   `json:"name"`
	Input    string   `json:"input"`
	Redacted string   `json:"redacted"`
	Secrets  []string `json:"secrets"`
}

type invalidCase struct {
	Name    string          `json:"name"`
	RPC     string          `json:"rpc"`
	Request json.RawMessage `json:"request"`
	Field   string          `json:"field"`
}

func loadVectors(t *testing.T) *vectorFile {
	t.Helper()
	raw, err := os.ReadFile(vectorPath)
	if err != nil {
		t.Fatalf("read the shared vectors: %v", err)
	}
	var v vectorFile
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("parse %s: %v", vectorPath, err)
	}
	if len(v.Classify) == 0 || len(v.Decide) == 0 || len(v.Invalid) == 0 {
		t.Fatalf("%s has no classify, decide or invalid cases", vectorPath)
	}
	return &v
}

func parseRequest(t *testing.T, raw json.RawMessage, msg proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal(raw, msg); err != nil {
		t.Fatalf("request %s is not proto3 JSON for %T: %v", raw, msg, err)
	}
}

// durationFields are compared as whole milliseconds.
var durationFields = map[string]bool{"delay": true, "retryAfter": true, "deadline": true}

// checkExpect checks that got (a message) has every field of want (a proto3
// JSON object that lists only the fields it checks). A field listed with its
// default value must be present with that value: an unset message field
// (e.g. a missing delay where "0s" is expected) does not match. A field
// listed as null must be unset.
func checkExpect(t *testing.T, want json.RawMessage, got proto.Message) {
	t.Helper()
	raw, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range matchObject("", want, raw) {
		t.Error(problem)
	}
	if t.Failed() {
		t.Logf("got %s", raw)
	}
}

func matchObject(path string, want, got json.RawMessage) []string {
	var w, g map[string]json.RawMessage
	if err := json.Unmarshal(want, &w); err != nil {
		return []string{path + ": expectation is not an object: " + err.Error()}
	}
	if err := json.Unmarshal(got, &g); err != nil || g == nil {
		return []string{path + ": want an object, got " + string(got)}
	}
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var problems []string
	for _, k := range keys {
		p := strings.TrimPrefix(path+"."+k, ".")
		wv := bytes.TrimSpace(w[k])
		gv, ok := g[k]
		gv = bytes.TrimSpace(gv)
		switch {
		case string(wv) == "null":
			if ok && string(gv) != "null" {
				problems = append(problems, p+": want it unset, got "+string(gv))
			}
		case !ok || string(gv) == "null":
			problems = append(problems, p+": missing, want "+string(wv))
		case len(wv) > 0 && wv[0] == '{':
			problems = append(problems, matchObject(p, wv, gv)...)
		case durationFields[k]:
			wd, werr := jsonDuration(wv)
			gd, gerr := jsonDuration(gv)
			if werr != nil || gerr != nil {
				problems = append(problems, p+": bad duration: want "+string(wv)+", got "+string(gv))
			} else if wd.Milliseconds() != gd.Milliseconds() {
				problems = append(problems, p+": want "+string(wv)+", got "+string(gv))
			}
		default:
			// Compared as values, not as text: "\u00a0" and a raw no-break
			// space are the same string.
			var wx, gx any
			werr, gerr := json.Unmarshal(wv, &wx), json.Unmarshal(gv, &gx)
			if werr != nil || gerr != nil || !reflect.DeepEqual(wx, gx) {
				problems = append(problems, fmt.Sprintf("%s: want %s, got %s", p, wv, gv))
			}
		}
	}
	return problems
}

func jsonDuration(raw json.RawMessage) (time.Duration, error) {
	var d durationpb.Duration
	if err := protojson.Unmarshal(raw, &d); err != nil {
		return 0, err
	}
	return d.AsDuration(), nil
}

// daemonClient is a client of the shared daemon with the fallback off, so a
// slow daemon fails the test instead of being answered locally.
func daemonClient(t *testing.T) *Client {
	t.Helper()
	d := requireDaemon(t)
	c, err := New(d.addr, WithFallbackDisabled(), WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDaemonVectorsClassify(t *testing.T) {
	v := loadVectors(t)
	c := daemonClient(t)
	for _, tc := range v.Classify {
		t.Run(tc.Name, func(t *testing.T) {
			req := &squawkv1.ClassifyRequest{}
			parseRequest(t, tc.Request, req)
			resp, err := c.Classify(context.Background(), req)
			if err != nil {
				t.Fatalf("Classify: %v", err)
			}
			checkExpect(t, tc.liveExpect(tc.Expect), resp)
		})
	}
}

func TestDaemonVectorsRedaction(t *testing.T) {
	v := loadVectors(t)
	c := daemonClient(t)
	for _, tc := range v.Redaction {
		t.Run(tc.Name, func(t *testing.T) {
			resp, err := c.Classify(context.Background(), &squawkv1.ClassifyRequest{ErrorMessage: tc.Input})
			if err != nil {
				t.Fatalf("Classify: %v", err)
			}
			if got := resp.GetRedactedMessage(); got != tc.Redacted {
				t.Errorf("redacted_message\n got %q\nwant %q", got, tc.Redacted)
			}
			for _, secret := range tc.Secrets {
				if strings.Contains(resp.GetRedactedMessage(), secret) {
					t.Errorf("redacted_message %q still holds %q", resp.GetRedactedMessage(), secret)
				}
			}
		})
	}
}

func TestDaemonVectorsDecide(t *testing.T) {
	v := loadVectors(t)
	c := daemonClient(t)
	for _, tc := range v.Decide {
		t.Run(tc.Name, func(t *testing.T) {
			req := &squawkv1.DecideRetryRequest{}
			parseRequest(t, tc.Request, req)
			ctx := context.Background()
			// The wire answer, strictly (presence included)...
			raw, err := c.PolicyService().DecideRetry(ctx, req)
			if err != nil {
				t.Fatalf("PolicyService().DecideRetry: %v", err)
			}
			want := tc.liveExpect(tc.Expect)
			checkExpect(t, want, raw)
			// ...and the same answer through the client's Decision.
			d, err := c.DecideRetry(ctx, req)
			if err != nil {
				t.Fatalf("DecideRetry: %v", err)
			}
			if d.Fallback {
				t.Fatalf("decision came from the fallback: %v", d.FallbackCause)
			}
			checkExpect(t, want, d.Proto())
		})
	}
	if n := c.FallbackCount(); n != 0 {
		t.Errorf("FallbackCount = %d, want 0", n)
	}
}

func TestDaemonVectorsInvalid(t *testing.T) {
	v := loadVectors(t)
	c := daemonClient(t)
	for _, tc := range v.Invalid {
		t.Run(tc.Name, func(t *testing.T) {
			var err error
			switch tc.RPC {
			case "Classify":
				req := &squawkv1.ClassifyRequest{}
				parseRequest(t, tc.Request, req)
				_, err = c.Classify(context.Background(), req)
			case "DecideRetry":
				req := &squawkv1.DecideRetryRequest{}
				parseRequest(t, tc.Request, req)
				_, err = c.DecideRetry(context.Background(), req)
			default:
				t.Fatalf("unknown rpc %q in the vector file", tc.RPC)
			}
			checkInvalid(t, err, tc.Field)
			wantInputError(t, err, tc.Field)
			wantBadRequest(t, err, tc.Field)
		})
	}
}

func checkInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want INVALID_ARGUMENT naming %q", field)
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("error %v has code %v; want InvalidArgument", err, st.Code())
	}
	if !strings.Contains(st.Message(), field) {
		t.Errorf("message %q does not name the field %q", st.Message(), field)
	}
}

// deadClient is a client whose daemon is not there: every decision comes
// from the local fallback.
func deadClient(t *testing.T, opts ...Option) *Client {
	t.Helper()
	c, err := New(mustFreeAddr(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFallbackVectorsInvalid(t *testing.T) {
	v := loadVectors(t)
	c := deadClient(t)
	for _, tc := range v.Invalid {
		// The fallback only decides; and it cannot know the daemon's
		// profiles, so it routes every profile name by "default".
		if tc.RPC != "DecideRetry" || tc.Field == "profile" {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			req := &squawkv1.DecideRetryRequest{}
			parseRequest(t, tc.Request, req)
			_, err := c.DecideRetry(context.Background(), req)
			checkInvalid(t, err, tc.Field)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tc.Field {
				t.Errorf("error %v is not an *InputError for field %q", err, tc.Field)
			}
			wantBadRequest(t, err, tc.Field)
		})
	}
	if n := c.FallbackCount(); n != 0 {
		t.Errorf("refused requests were counted as fallback decisions: %d", n)
	}
}
