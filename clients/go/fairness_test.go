package squawk

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

type sentFairness struct {
	upstream, key string
	weight        float64
}

// A step's fairness key and weight go with each of its Admits, a resend's
// too, and a step run inside it does not inherit them.
func TestRunSendsItsFairnessKeyWithEachAdmit(t *testing.T) {
	const admitted = `{"allowed": true, "reason": "REASON_ADMITTED", "permits": 1}`
	c, sd := scriptedClient(t, admitted, admitted, admitted)
	calls := 0
	_, err := Run(context.Background(), c, 1, func(ctx context.Context, _ int) (int, error) {
		calls++
		if calls == 1 {
			return 0, &StepError{HTTPStatus: 503}
		}
		return Run(ctx, c, 1, func(context.Context, int) (int, error) { return 0, nil }, RunOptions[int]{Upstream: "b"})
	}, RunOptions[int]{Upstream: "a", FairnessKey: "tenant-a", FairnessWeight: 3,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var sent []sentFairness
	for _, req := range sd.admitted() {
		sent = append(sent, sentFairness{req.GetUpstream(), req.GetFairnessKey(), req.GetFairnessWeight()})
	}
	want := []sentFairness{{"a", "tenant-a", 3}, {"a", "tenant-a", 3}, {"b", "", 0}}
	if !slices.Equal(sent, want) {
		t.Errorf("Admit requests sent %v, want %v", sent, want)
	}
}

// The daemon refuses a key or weight out of its bounds; Run refuses it
// first, before the step or Admit, naming the field.
func TestRunRefusesAFairnessKeyOrWeightOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    string
		weight float64
		field  string
	}{
		{"a key over 256 characters", strings.Repeat("é", 257), 0, "fairness_key"},
		{"a key with a control character", "tenant\n", 0, "fairness_key"},
		{"a key of invalid UTF-8", "tenant\xff", 0, "fairness_key"},
		{"a negative weight", "t", -1, "fairness_weight"},
		{"a weight over 100", "t", 100.5, "fairness_weight"},
		{"a NaN weight", "t", math.NaN(), "fairness_weight"},
		{"an infinite weight", "t", math.Inf(1), "fairness_weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, sd := scriptedClient(t)
			called := false
			_, err := Run(context.Background(), c, 1, func(context.Context, int) (int, error) {
				called = true
				return 0, nil
			}, RunOptions[int]{Upstream: "api.example", FairnessKey: tc.key, FairnessWeight: tc.weight})
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Errorf("Run = %v, want an *InputError naming %s", err, tc.field)
			}
			if called || len(sd.admitted()) != 0 {
				t.Errorf("the step ran (%v) or Admit was asked (%d)", called, len(sd.admitted()))
			}
		})
	}
	// The bounds themselves are allowed.
	c, _ := scriptedClient(t, `{"allowed": true, "reason": "REASON_ADMITTED", "permits": 1}`)
	_, err := Run(context.Background(), c, 1, func(context.Context, int) (int, error) { return 0, nil },
		RunOptions[int]{Upstream: "api.example", FairnessKey: strings.Repeat("é", 256), FairnessWeight: 100})
	if err != nil {
		t.Errorf("a key of 256 characters and a weight of 100: %v", err)
	}
}
