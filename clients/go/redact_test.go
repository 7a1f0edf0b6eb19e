package squawk

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// The shared redaction vectors, with the exact output each must give; they
// hold the corners of the rules too.
func loadRedactionVectors(t *testing.T) []struct {
	Name     string   `json:"name"`
	Input    string   `json:"input"`
	Redacted string   `json:"redacted"`
	Secrets  []string `json:"secrets"`
} {
	t.Helper()
	raw, err := os.ReadFile(vectorPath)
	if err != nil {
		t.Fatalf("read the shared vectors: %v", err)
	}
	var v struct {
		Redaction []struct {
			Name     string   `json:"name"`
			Input    string   `json:"input"`
			Redacted string   `json:"redacted"`
			Secrets  []string `json:"secrets"`
		} `json:"redaction"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("parse %s: %v", vectorPath, err)
	}
	if len(v.Redaction) == 0 {
		t.Fatalf("%s has no redaction cases", vectorPath)
	}
	return v.Redaction
}

func TestRedactVectorsExactly(t *testing.T) {
	for _, tc := range loadRedactionVectors(t) {
		t.Run(tc.Name, func(t *testing.T) {
			if got := redact(tc.Input); got != tc.Redacted {
				t.Errorf("redact(%q)\n got %q\nwant %q", tc.Input, got, tc.Redacted)
			}
		})
	}
}

func TestRedactKeepsOrdinaryText(t *testing.T) {
	for _, text := range []string{
		"Amadeus API error 400: INVALID CITY CODE: PARIS (check_in 2026-04-01)",
		"error code: 400", "status 503",
		"HTTP status 429: rate limit exceeded, retry-after: 3",
		"bypass: true, passed: 12 of 12, the session expired",
		"ssh://git@github.com/org/repo.git",
		"",
	} {
		if got := redact(text); got != text {
			t.Errorf("redact(%q) = %q, want it unchanged", text, got)
		}
	}
}

// TestRedactHostileInputsInBoundedTime is a safety bound, not a benchmark:
// every rule is linear, so a mebibyte of any of these takes well under a
// second; a quadratic rule would take minutes. The bound is generous so
// that a loaded machine never fails it.
func TestRedactHostileInputsInBoundedTime(t *testing.T) {
	const mib = 1 << 20
	units := []string{
		"eyJ-", "eyJa.", "eyJaaaaaaaa.", "sk-", "sk-a", "a_", "a-", "a", "-", "AKIA", "SG.a", "ya29.",
		"password=", `password="`, "password='a ", "password:", `apiKey: "`, "key ", "y:", "=", ":",
		"Key=", "x_token=", "secret: ", `password="a\\`, `password=\\`, "X-Amz-Signature=",
		`\"password\": \"`, `\npassword`, "Bearer ", "Token aB", "basic ", "x://a:", "x://",
		"a://a:a@", ":a@", "@", "-----BEGIN PRIVATE KEY-----", "-----BEGIN ", `\n`, `\u0041`,
		"é", "ééé key=", "\u2028", " ", "'", `"`,
	}
	for _, unit := range units {
		for _, tail := range []string{"", " =x"} {
			text := strings.Repeat(unit, mib/len(unit)+1)[:mib] + tail
			started := time.Now()
			redact(text)
			if took := time.Since(started); took > 5*time.Second {
				t.Errorf("redact(%q * %d + %q) took %v", unit, mib/len(unit), tail, took)
			}
		}
	}
}

// FuzzRedact checks, on the vector inputs and whatever the fuzzer finds,
// that redaction is idempotent. `go test` runs the seeds;
// `go test -fuzz=FuzzRedact` searches further.
func FuzzRedact(f *testing.F) {
	raw, err := os.ReadFile(vectorPath)
	if err != nil {
		f.Fatal(err)
	}
	var v struct {
		Redaction []struct {
			Input string `json:"input"`
		} `json:"redaction"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		f.Fatal(err)
	}
	for _, c := range v.Redaction {
		f.Add(c.Input)
	}
	f.Add("password=Q\x08sk-Q000000000000000DB_PASSWORD: Bearer Q")
	f.Add("password: Bearer Q\\rk-Q000000000000000")
	f.Add(`password: Bearer QBearer "password": "Q"password`)
	f.Add(`pAss:0BeArer "0"0`)
	f.Fuzz(func(t *testing.T, text string) {
		once := redact(text)
		if twice := redact(once); twice != once {
			t.Errorf("redact(%q) = %q, but redact of that = %q", text, once, twice)
		}
	})
}
