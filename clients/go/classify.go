package squawk

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// The fallback's classification and wait hints (docs/fallback.md): the
// status tables are generated into fallback_table.go; no text is read.

type statusRow struct {
	toolStatus int32
	category   squawkv1.ErrorCategory
	code       string
}

func checkStatus(status int32) error {
	if status != 0 && (status < 100 || status > 599) {
		return &InputError{Field: "http_status", Message: fmt.Sprintf("%d is not an HTTP status (0 or 100..599)", status)}
	}
	return nil
}

func toolStatus(upstream int32) statusRow {
	if row, ok := statusTable[upstream]; ok {
		return row
	}
	switch {
	case upstream == 0:
		return noStatusRow
	case upstream >= 400 && upstream < 500:
		return other4xxRow
	case upstream >= 500:
		return other5xxRow
	}
	return otherStatusRow
}

// classifyLocal classifies a failure by the status tables alone: an error
// text is neither read for a status nor copied (redacted_message stays
// empty). httpStatus must already be valid (checkStatus).
func classifyLocal(httpStatus int32, transportFailure bool, headers map[string]string, now time.Time) *squawkv1.ClassifyResponse {
	var upstream int32
	if !transportFailure {
		upstream = httpStatus
	}
	row := toolStatus(upstream)
	if transportFailure {
		row.code = transportCode
	}
	resp := &squawkv1.ClassifyResponse{
		HttpStatus:     row.toolStatus,
		Category:       row.category,
		Retryable:      upstream == 0 || transientStatus(upstream),
		Code:           row.code,
		UpstreamStatus: upstream,
	}
	if wait, _, ok := waitHint(headers, now); ok {
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

// trimOWS drops the spaces and tabs around a header value (RFC 9110 OWS).
func trimOWS(value string) string {
	return strings.Trim(value, " \t")
}

// digits reads a value of ASCII digits alone; a sign, a fraction or a word
// is malformed. Too many digits saturate.
func digits(value string) (uint64, bool) {
	if value == "" || !asciiDigits(value) {
		return 0, false
	}
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return math.MaxUint64, true
	}
	return n, true
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

// scaled is n units as a Duration, saturating instead of overflowing.
func scaled(n uint64, unit time.Duration) time.Duration {
	if n > uint64(math.MaxInt64/int64(unit)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(n) * unit
}

// imfFixdate is RFC 9110's preferred HTTP-date, the only date form the
// fallback reads. time.Parse alone is more lenient (lower-case names, runs
// of spaces, one-digit hours), so the shape is matched first.
const imfFixdate = "Mon, 02 Jan 2006 15:04:05 GMT"

var imfShape = regexp.MustCompile(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} ` +
	`(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT$`)

// parseIMFFixdate reads an IMF-fixdate; ok is false for any other text and
// for a date that does not exist (31 February, hour 24).
func parseIMFFixdate(value string) (time.Time, bool) {
	if !imfShape.MatchString(value) {
		return time.Time{}, false
	}
	when, err := time.Parse(imfFixdate, value)
	return when, err == nil
}

// waitHint is the wait the server asked for, capped at maxRetryAfter, and
// the header that gave it: retry-after-ms when it parses, else Retry-After
// (decimal seconds or IMF-fixdate), else grpc-retry-pushback-ms. A malformed
// value leaves the next header to decide; ok is false when none gave a wait.
func waitHint(headers map[string]string, now time.Time) (time.Duration, string, bool) {
	wait, from, ok := uncappedWaitHint(headers, now)
	return min(wait, maxRetryAfter), from, ok
}

func uncappedWaitHint(headers map[string]string, now time.Time) (time.Duration, string, bool) {
	if value, ok := header(headers, "retry-after-ms"); ok {
		if wait, ok := decimalWait(trimOWS(value), time.Millisecond); ok {
			return wait, "retry-after-ms", true
		}
	}
	if value, ok := header(headers, "retry-after"); ok {
		value = trimOWS(value)
		if wait, ok := decimalWait(value, time.Second); ok {
			return wait, "Retry-After", true
		}
		if when, ok := parseIMFFixdate(value); ok {
			return max(0, when.Sub(now)).Round(time.Microsecond), "Retry-After", true
		}
	}
	if value, ok := header(headers, "grpc-retry-pushback-ms"); ok {
		if ms, ok := pushbackMS(trimOWS(value)); ok {
			return scaled(ms, time.Millisecond), "grpc-retry-pushback-ms", true
		}
	}
	return 0, "", false
}

// decimalWait reads a wait of non-negative ASCII decimal units (retry-after-ms
// in milliseconds, Retry-After in seconds), a fraction allowed, capped at
// maxRetryAfter and kept to whole microseconds (half to even). A sign, an
// exponent, NaN or inf is malformed.
func decimalWait(value string, unit time.Duration) (time.Duration, bool) {
	n, ok := plainDecimal(value)
	if !ok {
		return 0, false
	}
	// Leading zeros are no digits of the bound: "000...07" is 7.
	if whole, _, _ := strings.Cut(value, "."); len(strings.TrimLeft(whole, "0")) > 12 {
		return maxRetryAfter, true // already more than the cap
	}
	micros := math.RoundToEven(min(n, float64(maxRetryAfter)/float64(unit)) * float64(unit/time.Microsecond))
	return time.Duration(micros) * time.Microsecond, true
}

// plainDecimal reads ASCII digits with an optional fraction ("5", "1.5",
// ".5", "5."); a value past float64's range reads as +Inf.
func plainDecimal(value string) (float64, bool) {
	whole, frac, dot := strings.Cut(value, ".")
	if !asciiDigits(whole) || !asciiDigits(frac) || (whole == "" && frac == "") || (whole == "" && !dot) {
		return 0, false
	}
	n, err := strconv.ParseFloat(value, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return n, true
}

// pushbackMS reads a grpc-retry-pushback-ms value: an optional sign, then
// ASCII digits. ok is false when the value asks not to retry: gRFC A6 reads
// a negative or unparsable value so ("-0" is zero, a "+" is allowed).
func pushbackMS(value string) (uint64, bool) {
	sign := ""
	if value != "" && (value[0] == '+' || value[0] == '-') {
		sign, value = value[:1], value[1:]
	}
	ms, ok := digits(value)
	if !ok || (sign == "-" && ms > 0) {
		return 0, false
	}
	return ms, true
}

// pushbackRefuses reports whether the server's grpc-retry-pushback-ms asks
// not to retry (gRFC A6 "Pushback").
// shouldRetry reads the server's x-should-retry as the official SDKs do:
// exactly "true" or "false" (spaces and tabs around it ignored) says so;
// anything else, or no header, says nothing (ok false).
func shouldRetry(headers map[string]string) (retry, ok bool) {
	value, found := header(headers, "x-should-retry")
	switch trimOWS(value) {
	case "true":
		return true, found
	case "false":
		return false, found
	}
	return false, false
}

func pushbackRefuses(headers map[string]string) bool {
	value, ok := header(headers, "grpc-retry-pushback-ms")
	if !ok {
		return false
	}
	_, wait := pushbackMS(trimOWS(value))
	return !wait
}
