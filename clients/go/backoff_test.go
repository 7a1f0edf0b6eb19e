package squawk

import (
	"testing"
	"time"
)

// The vector file pins the backoff through DecideRetry; these check the
// edges the vectors cannot reach.
func TestBackoffEdges(t *testing.T) {
	b := DefaultBackoff
	if got, want := b.Delay(0), b.Delay(1); got != want {
		t.Errorf("Delay(0) = %v, want Delay(1) = %v", got, want)
	}
	for _, attempt := range []int{7, 100, 1025, 1 << 30} {
		if got := b.Delay(attempt); got > b.Max || got < b.Max*9/10 {
			t.Errorf("Delay(%d) = %v, want within 10%% under the %v cap", attempt, got, b.Max)
		}
	}
	if got := b.Delay(3); got%time.Millisecond != 0 {
		t.Errorf("Delay(3) = %v is not whole milliseconds", got)
	}
	flat := Backoff{Initial: time.Second, Max: time.Minute, Factor: 1}
	if got := flat.Delay(1); got != 1084*time.Millisecond { // 1000 × (1 + 0.1 × sin 1)
		t.Errorf("flat.Delay(1) = %v, want 1.084s", got)
	}
}

// docs/fallback.md: IMF-fixdate alone, as the TypeScript client reads it;
// time.Parse by itself would take the lenient forms too.
func TestOnlyAnIMFFixdateIsADate(t *testing.T) {
	want := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	if got, ok := parseIMFFixdate("Wed, 21 Oct 2015 07:28:00 GMT"); !ok || !got.Equal(want) {
		t.Errorf("parseIMFFixdate = %v, %v; want %v", got, ok, want)
	}
	for _, value := range []string{
		"wed, 21 oct 2015 07:28:00 GMT",
		"Wed,  21 Oct 2015 07:28:00 GMT",
		"Wed, 21 Oct 2015 7:28:00 GMT",
		"Wed, 21 Oct 2015 07:28:00 gmt",
		"Wed, 31 Feb 2015 07:28:00 GMT",
		"Wed, 21 Oct 2015 24:00:00 GMT",
		"Wednesday, 21-Oct-15 07:28:00 GMT",
	} {
		if got, ok := parseIMFFixdate(value); ok {
			t.Errorf("parseIMFFixdate(%q) = %v; want no date", value, got)
		}
	}
}
