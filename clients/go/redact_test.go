package squawk

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// The shared redaction vectors, with the exact output each must give.
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

func TestRedactRules(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// An unquoted value runs to whitespace or a delimiter, a marker included.
		{"key=[REDACTED]token=abcdef12", "key=[REDACTED]"},
		// A name that ends in a secret word at a boundary; others are not secret.
		{"monkey=banana turkey: 3 max_tokens=9 my_token=abc", "monkey=banana turkey: 3 max_tokens=9 my_token=[REDACTED]"},
		{"MONKEY=1 MonKey=2 XAPIKey=3 APIKEY=4", "MONKEY=1 MonKey=[REDACTED] XAPIKey=[REDACTED] APIKEY=[REDACTED]"},
		// The separator takes every ":" and "=", so "==" is no value.
		{"password==", "password=="},
		{"secret := 's3'", "secret := '[REDACTED]'"},
		// A quoted secret name followed by a separator is a name.
		{`password= "token": "abc"`, `password= "token": "[REDACTED]"`},
		// A value ending in a secret name and separator runs on over the next.
		{"api_key:\n  secret: xyz\nnext", "api_key:\n  [REDACTED]\nnext"},
		{"password=(Bearer abc123 rest", "password=[REDACTED] rest"},
		// The last value of a chain keeps its closing quote.
		{`pass:xBearer "a b"c`, `pass:[REDACTED]"c`},
		// An empty quoted value, and one never closed.
		{`password: ""`, `password: ""`},
		{`password: "abc def`, `password: "[REDACTED] def`},
		// Credentials that read as words stay; tokens need a boundary.
		{"Bearer INVALID. Basic upstream. Token Expired", "Bearer INVALID. Basic upstream. Token Expired"},
		{"xsk-abcdefghijkl \\rk-abcdefghijkl \\nsk-abcdefghijkl", "xsk-abcdefghijkl \\rk-abcdefghijkl \\n[REDACTED]"},
		{"AKIAIOSFODNN7EXAMPLEX AKIAIOSFODNN7EXAMPLE-", "AKIAIOSFODNN7EXAMPLEX [REDACTED]-"},
		// Non-ASCII whitespace is Python's \s; the Kelvin sign is no k; astral characters pass.
		{"password:\u00a0abc \u212aey=abc", "password:\u00a0[REDACTED] \u212aey=abc"},
		{"token=\U0001F511x\U0001F511 \U0001F511sk-abcdefghijkl", "token=[REDACTED] \U0001F511[REDACTED]"},
	} {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
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
