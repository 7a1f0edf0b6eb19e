package squawk

import (
	"context"
	"net/http"
	"strings"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// criticalityHeader is the header that carries a step's criticality to the
// next hop: the level's name without its CRITICALITY_ prefix, e.g.
// "SHEDDABLE". RoundTripper sends it; CriticalityFromHeader reads it.
const criticalityHeader = "squawk-criticality"

// criticalityLevels are the levels the header may name, by name.
var criticalityLevels = map[string]squawkv1.Criticality{
	"CRITICAL_PLUS":  squawkv1.Criticality_CRITICALITY_CRITICAL_PLUS,
	"CRITICAL":       squawkv1.Criticality_CRITICALITY_CRITICAL,
	"SHEDDABLE_PLUS": squawkv1.Criticality_CRITICALITY_SHEDDABLE_PLUS,
	"SHEDDABLE":      squawkv1.Criticality_CRITICALITY_SHEDDABLE,
}

// criticalityName is level's name in the header, "" for none or unknown.
func criticalityName(level squawkv1.Criticality) string {
	name := strings.TrimPrefix(level.String(), "CRITICALITY_")
	if _, ok := criticalityLevels[name]; !ok {
		return ""
	}
	return name
}

// CriticalityFromHeader returns the level the squawk-criticality header of
// an incoming request names (CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS or
// SHEDDABLE, in any ASCII case, spaces and tabs trimmed; a comma-separated
// list counts as the header repeated). Absent, empty, unknown,
// or repeated with different levels, it is CRITICALITY_UNSPECIFIED, so that
// the step keeps its own default: a caller cannot make a malformed header
// mean more than no header. A service running steps for incoming requests
// passes it as RunOptions.Criticality.
func CriticalityFromHeader(h http.Header) squawkv1.Criticality {
	found := squawkv1.Criticality_CRITICALITY_UNSPECIFIED
	for _, field := range h.Values(criticalityHeader) {
		// A comma-separated list is the header repeated (RFC 9110 5.3).
		for _, v := range strings.Split(field, ",") {
			level, ok := criticalityLevels[asciiUpper(strings.Trim(v, " \t"))]
			if !ok || (found != squawkv1.Criticality_CRITICALITY_UNSPECIFIED && level != found) {
				return squawkv1.Criticality_CRITICALITY_UNSPECIFIED
			}
			found = level
		}
	}
	return found
}

// criticalityKey is the ctx key of the running step's criticality; only Run
// sets it, so a value found under it is always a known level.
type criticalityKey struct{}

// CriticalityFrom returns the criticality of the step whose ctx this is:
// its RunOptions.Criticality, or the one it inherited from the step it runs
// inside. CRITICALITY_UNSPECIFIED (read as CRITICAL) outside any step that
// named one. A Run whose options name none sends this one with its Admits.
func CriticalityFrom(ctx context.Context) squawkv1.Criticality {
	level, _ := ctx.Value(criticalityKey{}).(squawkv1.Criticality)
	return level
}

// stepCriticality is a step's level (named, else inherited from ctx) and the
// ctx its step function is called with, which carries that level.
func stepCriticality(ctx context.Context, named squawkv1.Criticality) (squawkv1.Criticality, context.Context) {
	inherited := CriticalityFrom(ctx)
	if named == squawkv1.Criticality_CRITICALITY_UNSPECIFIED || named == inherited {
		return inherited, ctx
	}
	return named, context.WithValue(ctx, criticalityKey{}, named)
}

// asciiUpper upper-cases ASCII letters only: strings.ToUpper would read
// a long s as an S, which the other clients refuse.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
