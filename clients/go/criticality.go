package squawk

import (
	"context"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

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
