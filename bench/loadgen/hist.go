package main

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// subBits sets the histogram's precision: every power of two is split into
// 2^subBits buckets, so a bucket is at most 1/128 (0.8 %) wide relative to
// its value. Exact below 128 ns.
const (
	subBits  = 7
	subCount = 1 << subBits
)

// histogram counts latencies in log-linear buckets, like HdrHistogram but
// fixed-size: memory stays at 64 KiB however long the run, which a ten-minute
// soak at thousands of calls/s needs. Safe for concurrent record calls.
type histogram struct {
	counts [64 * subCount]atomic.Uint64
	total  atomic.Uint64
	max    atomic.Int64
}

func bucket(ns int64) int {
	v := uint64(max(ns, 0))
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - 1 - subBits
	return shift*subCount + int(v>>shift)
}

// midpoint is the middle of bucket i, the value a percentile reports.
func midpoint(i int) float64 {
	if i < 2*subCount {
		return float64(i)
	}
	shift := i/subCount - 1
	low := uint64(i-shift*subCount) << shift
	return float64(low) + float64(uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	ns := d.Nanoseconds()
	h.counts[bucket(ns)].Add(1)
	h.total.Add(1)
	for {
		old := h.max.Load()
		if ns <= old || h.max.CompareAndSwap(old, ns) {
			return
		}
	}
}

// quantile returns the q-quantile (0 < q <= 1) in milliseconds, 0 when empty.
func (h *histogram) quantile(q float64) float64 {
	total := h.total.Load()
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return midpoint(i) / 1e6
		}
	}
	return float64(h.max.Load()) / 1e6
}
