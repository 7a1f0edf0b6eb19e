package squawk

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// Local classification for the fallback's decisions: the port of
// sidecar/core/squawk/policy/classify.py and headers.py under the "default" profile.

// pySpace is Python's \s for str patterns, which RE2's ASCII \s is not.
const pySpace = `\s\v\p{Z}\x{85}\x{1c}-\x{1f}`

// statusInText finds "status 404", "error: 503", "code 429". RE2 has no
// lookahead, so the digits are taken greedily and only a run of exactly
// three counts, which is what the daemon's `[0-9]{3}(?![0-9])` means.
var statusInText = regexp.MustCompile(`(?i)(?:status|error|code)[:` + pySpace + `]+([0-9]+)`)

type statusRow struct {
	toolStatus int32
	category   squawkv1.ErrorCategory
	code       string
}

// statusTable maps an upstream status to what the tool answers with.
var statusTable = map[int32]statusRow{
	400: {400, squawkv1.ErrorCategory_ERROR_CATEGORY_INPUT_ERROR, "INVALID_INPUT"},
	401: {401, squawkv1.ErrorCategory_ERROR_CATEGORY_AUTH_ERROR, "UNAUTHORIZED"},
	403: {403, squawkv1.ErrorCategory_ERROR_CATEGORY_AUTH_ERROR, "FORBIDDEN"},
	404: {400, squawkv1.ErrorCategory_ERROR_CATEGORY_INPUT_ERROR, "NOT_FOUND"},
	405: {405, squawkv1.ErrorCategory_ERROR_CATEGORY_INPUT_ERROR, "METHOD_NOT_ALLOWED"},
	408: {502, squawkv1.ErrorCategory_ERROR_CATEGORY_SERVICE_ERROR, "UPSTREAM_TIMEOUT"},
	409: {400, squawkv1.ErrorCategory_ERROR_CATEGORY_INPUT_ERROR, "CONFLICT"},
	422: {400, squawkv1.ErrorCategory_ERROR_CATEGORY_INPUT_ERROR, "UNPROCESSABLE"},
	429: {429, squawkv1.ErrorCategory_ERROR_CATEGORY_RATE_LIMIT, "RATE_LIMITED"},
}

func checkStatus(status int32) error {
	if status != 0 && (status < 100 || status > 599) {
		return &InputError{Field: "http_status", Message: fmt.Sprintf("%d is not an HTTP status (0 or 100..599)", status)}
	}
	return nil
}

// statusFromText is the first real HTTP status (100..599) named in an error
// text, or 0.
func statusFromText(message string) int32 {
	for _, m := range statusInText.FindAllStringSubmatch(message, -1) {
		if len(m[1]) != 3 {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n >= 100 && n <= 599 {
			return int32(n)
		}
	}
	return 0
}

func toolStatus(upstream int32) statusRow {
	if row, ok := statusTable[upstream]; ok {
		return row
	}
	switch {
	case upstream == 0:
		return statusRow{502, squawkv1.ErrorCategory_ERROR_CATEGORY_SERVICE_ERROR, "UPSTREAM_UNAVAILABLE"}
	case upstream >= 400 && upstream < 500:
		return statusRow{400, squawkv1.ErrorCategory_ERROR_CATEGORY_INPUT_ERROR, "UPSTREAM_CLIENT_ERROR"}
	case upstream >= 500:
		return statusRow{502, squawkv1.ErrorCategory_ERROR_CATEGORY_SERVICE_ERROR, "UPSTREAM_SERVER_ERROR"}
	}
	// 1xx-3xx reported as a failure: the answer will not change on resend.
	return statusRow{502, squawkv1.ErrorCategory_ERROR_CATEGORY_SERVICE_ERROR, "UNEXPECTED_STATUS"}
}

// classifyLocal classifies a failure under the "default" profile. httpStatus
// must already be valid (checkStatus).
func classifyLocal(message string, httpStatus int32, transportFailure bool, headers map[string]string, now time.Time) *squawkv1.ClassifyResponse {
	var upstream int32
	if !transportFailure {
		upstream = httpStatus
		if upstream == 0 {
			upstream = statusFromText(message)
		}
	}
	row := toolStatus(upstream)
	if transportFailure {
		row.code = "TRANSPORT_FAILURE"
	}
	resp := &squawkv1.ClassifyResponse{
		HttpStatus:      row.toolStatus,
		Category:        row.category,
		Retryable:       upstream == 0 || transientStatus(upstream),
		Code:            row.code,
		UpstreamStatus:  upstream,
		RedactedMessage: redact(message),
	}
	if wait, ok := retryAfter(headers, now); ok {
		resp.RetryAfter = durationpb.New(wait)
	}
	return resp
}

// header looks name (lower case) up case-insensitively: the exact key
// first, then the first key, in sorted order, that folds to it.
func header(headers map[string]string, name string) (string, bool) {
	if v, ok := headers[name]; ok {
		return v, true
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		if strings.ToLower(k) == name {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", false
	}
	slices.Sort(keys)
	return headers[keys[0]], true
}

func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// digits reads a value of plain ASCII digits (surrounding spaces allowed);
// a fraction, a sign or a word is malformed.
func digits(value string) (uint64, bool) {
	value = strings.TrimFunc(value, isPySpace)
	if value == "" {
		return 0, false
	}
	for i := 0; i < len(value); i++ {
		if value[i] < '0' || value[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return math.MaxUint64, true // too many digits: saturates below
	}
	return n, true
}

// scaled is n units as a Duration, saturating instead of overflowing.
func scaled(n uint64, unit time.Duration) time.Duration {
	if n > uint64(math.MaxInt64/int64(unit)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(n) * unit
}

// maxRetryAfter caps a server's hint, as the daemon does: a wait of more than
// a day says "not today", and the deadline guard still applies below it.
const maxRetryAfter = 24 * time.Hour

// retryAfter is the wait the server asked for in Retry-After (seconds or an
// HTTP-date) or grpc-retry-pushback-ms, capped at maxRetryAfter; ok is false
// when it asked for none or sent garbage.
func retryAfter(headers map[string]string, now time.Time) (time.Duration, bool) {
	wait, _, ok := waitHint(headers, now)
	return wait, ok
}

// waitHint is retryAfter with the header that gave the wait
// ("retry-after-ms", "Retry-After" or "grpc-retry-pushback-ms"), named where
// the choice is made so that an explanation cannot credit the wrong one.
// retry-after-ms wins when it parses, then Retry-After; a malformed one
// leaves the next header to decide.
func waitHint(headers map[string]string, now time.Time) (wait time.Duration, from string, ok bool) {
	wait, from, ok = uncappedWaitHint(headers, now)
	return min(wait, maxRetryAfter), from, ok
}

func uncappedWaitHint(headers map[string]string, now time.Time) (time.Duration, string, bool) {
	if len(headers) == 0 {
		return 0, "", false
	}
	if value, ok := header(headers, "retry-after-ms"); ok {
		if wait, ok := retryAfterMS(value); ok {
			return wait, "retry-after-ms", true
		}
	}
	if value, ok := header(headers, "retry-after"); ok {
		if seconds, ok := digits(value); ok {
			return scaled(seconds, time.Second), "Retry-After", true
		}
		if when, ok := parseHTTPDate(value); ok {
			return max(0, when.Sub(now)).Round(time.Microsecond), "Retry-After", true
		}
	}
	if value, ok := header(headers, "grpc-retry-pushback-ms"); ok {
		if ms, ok := pushbackMS(value); ok {
			return scaled(ms, time.Millisecond), "grpc-retry-pushback-ms", true
		}
	}
	return 0, "", false
}

// retryAfterMS reads a retry-after-ms value as the daemon does (headers.py),
// the header the OpenAI and Anthropic SDKs read before Retry-After: a plain
// non-negative ASCII decimal of milliseconds, a fraction allowed, within
// Python's whitespace, kept to whole microseconds as Python's timedelta keeps
// it. A sign, an exponent, NaN or inf is malformed (ok false); more than 12
// whole digits already means over the cap.
func retryAfterMS(value string) (time.Duration, bool) {
	value = strings.TrimFunc(value, isPySpace)
	whole, frac, dot := strings.Cut(value, ".")
	if !asciiDigits(whole) || !asciiDigits(frac) || (whole == "" && frac == "") || (whole == "" && !dot) {
		return 0, false
	}
	if len(whole) > 12 {
		return maxRetryAfter, true
	}
	ms, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return 0, false
	}
	micros := math.RoundToEven(min(ms, float64(maxRetryAfter/time.Millisecond)) * 1000)
	return time.Duration(micros) * time.Microsecond, true
}

// asciiDigits reports whether value is only ASCII digits (an empty value is).
func asciiDigits(value string) bool {
	for i := 0; i < len(value); i++ {
		if value[i] < '0' || value[i] > '9' {
			return false
		}
	}
	return true
}

// pushbackMS reads a grpc-retry-pushback-ms value as the daemon does
// (headers.py): an optional sign, then ASCII digits, within Python's
// whitespace. ok is false when the value asks not to retry: gRFC A6 reads a
// negative or unparsable value so, as grpc-go's strconv.Atoi does ("-0" is
// zero, a leading "+" is allowed).
func pushbackMS(value string) (uint64, bool) {
	value = strings.TrimFunc(value, isPySpace)
	sign := ""
	if value != "" && (value[0] == '+' || value[0] == '-') {
		sign, value = value[:1], value[1:]
	}
	if value == "" || strings.TrimFunc(value, isPySpace) != value {
		return 0, false
	}
	ms, ok := digits(value)
	if !ok || (sign == "-" && ms > 0) {
		return 0, false
	}
	return ms, true
}

// pushbackRefuses reports whether the server's grpc-retry-pushback-ms asks
// not to retry (gRFC A6 "Pushback").
func pushbackRefuses(headers map[string]string) bool {
	value, ok := header(headers, "grpc-retry-pushback-ms")
	if !ok {
		return false
	}
	_, wait := pushbackMS(value)
	return !wait
}
