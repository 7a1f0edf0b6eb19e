package squawk

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

const (
	critical      = squawkv1.Criticality_CRITICALITY_CRITICAL
	sheddable     = squawkv1.Criticality_CRITICALITY_SHEDDABLE
	sheddablePlus = squawkv1.Criticality_CRITICALITY_SHEDDABLE_PLUS
	unspecified   = squawkv1.Criticality_CRITICALITY_UNSPECIFIED
)

type sentLevel struct {
	upstream string
	level    squawkv1.Criticality
}

func sentLevels(sd *scriptedDaemon) []sentLevel {
	var sent []sentLevel
	for _, req := range sd.admitted() {
		sent = append(sent, sentLevel{req.GetUpstream(), req.GetCriticality()})
	}
	return sent
}

// A step's level goes with its Admit and rides its ctx: a Run inside it
// naming none sends it, one naming its own keeps that, and outside every
// step nothing is sent.
func TestRunCriticalityIsInheritedThroughCtx(t *testing.T) {
	const admitted = `{"allowed": true, "reason": "REASON_ADMITTED", "permits": 1}`
	c, sd := scriptedClient(t, admitted, admitted, admitted, admitted, admitted)
	ctx := context.Background()
	levelIn := func(ctx context.Context, _ int) (squawkv1.Criticality, error) { return CriticalityFrom(ctx), nil }

	got, err := Run(ctx, c, 1, func(ctx context.Context, _ int) (squawkv1.Criticality, error) {
		if _, err := Run(ctx, c, 1, levelIn, RunOptions[int]{Upstream: "b"}); err != nil {
			return 0, err
		}
		own, err := Run(ctx, c, 1, levelIn, RunOptions[int]{Upstream: "c", Criticality: critical})
		if err != nil || own != critical {
			t.Errorf("inside a step naming CRITICAL, CriticalityFrom = %v, %v", own, err)
		}
		return CriticalityFrom(ctx), nil
	}, RunOptions[int]{Upstream: "a", Criticality: sheddable})
	if err != nil || got != sheddable {
		t.Fatalf("the outer step saw %v, %v; want its own SHEDDABLE", got, err)
	}
	if level := CriticalityFrom(ctx); level != unspecified {
		t.Errorf("the caller's ctx carries %v after the step", level)
	}
	if _, err := Run(ctx, c, 1, levelIn, RunOptions[int]{Upstream: "d"}); err != nil {
		t.Fatal(err)
	}

	// A step without an upstream asks no Admit, but its level still rides
	// the ctx, into a goroutine too.
	_, err = Run(ctx, c, 1, func(ctx context.Context, _ int) (int, error) {
		var wg sync.WaitGroup
		var inner error
		wg.Go(func() { _, inner = Run(ctx, c, 1, levelIn, RunOptions[int]{Upstream: "f"}) })
		wg.Wait()
		return 0, inner
	}, RunOptions[int]{Criticality: sheddablePlus})
	if err != nil {
		t.Fatal(err)
	}

	want := []sentLevel{{"a", sheddable}, {"b", sheddable}, {"c", critical}, {"d", unspecified}, {"f", sheddablePlus}}
	if sent := sentLevels(sd); !slices.Equal(sent, want) {
		t.Errorf("Admit requests sent %v, want %v", sent, want)
	}
}

// The daemon refuses a level it does not know; Run refuses it first, before
// the step or Admit.
func TestRunRefusesAnUnknownCriticality(t *testing.T) {
	c, sd := scriptedClient(t)
	called := false
	_, err := Run(context.Background(), c, 1, func(context.Context, int) (int, error) {
		called = true
		return 0, nil
	}, RunOptions[int]{Upstream: "api.example", Criticality: squawkv1.Criticality(9)})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Field != "criticality" {
		t.Errorf("Run = %v, want an *InputError naming criticality", err)
	}
	if called || len(sd.admitted()) != 0 {
		t.Errorf("the step ran (%v) or Admit was asked (%d)", called, len(sd.admitted()))
	}
}
