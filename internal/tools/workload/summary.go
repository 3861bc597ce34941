package workload

import (
	"math"
	"slices"
	"time"
)

// Bucket summarizes the RPCs whose size falls in (previous bound, MaxSize].
type Bucket struct {
	MaxSize int
	// Fraction is the cumulative fraction of the distribution's messages
	// with size <= MaxSize, estimated from the samples summarized: the
	// share of all of them in this bucket or an earlier one.
	Fraction float64
	Count    int

	// RTT percentiles of the bucket's RPCs; 0 when Count is 0.
	P50, P99, P999 time.Duration

	// Percentiles of RTT / Baseline.RTT(size) over the bucket's RPCs; 0
	// when Count is 0 or there is no baseline.
	Slowdown50, Slowdown99, Slowdown999 float64
}

// Bounds returns n bucket upper bounds at the distribution's quantiles
// 1/n, 2/n, ..., 1, ascending with duplicates removed, so it can be
// shorter than n. The last is always d.Max(). n below 1 is taken as 1.
func Bounds(d *Dist, n int) []int {
	n = max(n, 1)
	out := make([]int, 0, n)
	for i := 1; i <= n; i++ {
		q := float64(i) / float64(n)
		if i == n {
			q = 1
		}
		s := d.Quantile(q)
		if len(out) == 0 || s > out[len(out)-1] {
			out = append(out, s)
		}
	}
	return out
}

// Summarize puts each sample in the first bucket whose bound is at least
// its size (a size above every bound goes in the last bucket) and
// summarizes each bucket. bounds is read as a set: it is sorted and
// deduplicated first; if it is empty there is one bucket bounded by the
// largest sample size. Slowdowns divide by base's RTT of each sample's
// size; base may be nil, in which case slowdowns are 0, as they are for a
// sample whose baseline RTT is 0.
func Summarize(samples []Sample, bounds []int, base Unloaded) []Bucket {
	if base == nil {
		base = (*Baseline)(nil)
	}
	bounds = slices.Compact(slices.Sorted(slices.Values(bounds)))
	if len(bounds) == 0 {
		largest := 0
		for _, s := range samples {
			largest = max(largest, s.Size)
		}
		bounds = []int{largest}
	}
	rtts := make([][]time.Duration, len(bounds))
	slows := make([][]float64, len(bounds))
	for _, s := range samples {
		i, _ := slices.BinarySearch(bounds, s.Size)
		i = min(i, len(bounds)-1)
		rtts[i] = append(rtts[i], s.RTT)
		if ref := base.RTT(s.Size); ref > 0 {
			slows[i] = append(slows[i], float64(s.RTT)/float64(ref))
		}
	}
	out := make([]Bucket, len(bounds))
	seen := 0
	for i, bound := range bounds {
		seen += len(rtts[i])
		out[i] = summarizeBucket(bound, rtts[i], slows[i])
		if len(samples) > 0 {
			out[i].Fraction = float64(seen) / float64(len(samples))
		}
	}
	return out
}

// summarizeBucket computes one bucket's percentiles, sorting its slices.
func summarizeBucket(bound int, rtts []time.Duration, slows []float64) Bucket {
	slices.Sort(rtts)
	slices.Sort(slows)
	return Bucket{
		MaxSize:     bound,
		Count:       len(rtts),
		P50:         Percentile(rtts, 0.50),
		P99:         Percentile(rtts, 0.99),
		P999:        Percentile(rtts, 0.999),
		Slowdown50:  percentileFloat(slows, 0.50),
		Slowdown99:  percentileFloat(slows, 0.99),
		Slowdown999: percentileFloat(slows, 0.999),
	}
}

// Percentile returns the p-th quantile of sorted (ascending) by the
// nearest-rank method: the smallest element with at least a fraction p of
// all elements at or below it. p is a fraction, 0.99 for the 99th
// percentile; it is clamped to [0, 1], and 0 gives the minimum. An empty
// slice gives 0.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[rank(len(sorted), p)]
}

// percentileFloat is Percentile for float64 values.
func percentileFloat(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[rank(len(sorted), p)]
}

// rank returns the 0-based nearest-rank index of quantile p among n > 0
// sorted values: ceil(p*n) - 1, clamped to [0, n-1]. A tiny tolerance
// keeps products such as 0.999 * 1000 from rounding up a rank.
func rank(n int, p float64) int {
	if !(p > 0) {
		return 0
	}
	if p >= 1 {
		return n - 1
	}
	r := int(math.Ceil(p*float64(n) - 1e-9))
	return min(max(r, 1), n) - 1
}
