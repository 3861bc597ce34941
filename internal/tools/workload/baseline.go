package workload

import (
	"math"
	"slices"
	"time"
)

// Sample is one completed RPC: its request size in bytes and its
// round-trip time.
type Sample struct {
	Size int
	RTT  time.Duration
}

// BaselineBinsPerDecade is how many log-spaced size bins a [Baseline]
// uses per factor of ten in size.
const BaselineBinsPerDecade = 5

// Unloaded is an unloaded RTT as a function of message size: a
// [Baseline], or the [Fastest] of several. RTT returns 0 where it has no
// data.
type Unloaded interface {
	RTT(size int) time.Duration
}

// Fastest is, at each size, the shortest unloaded RTT of the baselines
// (those with data there): the best any of the transports measured
// achieves. Slowdowns of several transports over one Fastest share their
// denominator, so at a size they compare as their RTTs do; over each
// transport's own Baseline, a transport that is faster unloaded reads a
// larger slowdown at equal latency.
func Fastest(bases ...*Baseline) Unloaded { return fastest(bases) }

type fastest []*Baseline

func (f fastest) RTT(size int) time.Duration {
	var best time.Duration
	for _, b := range f {
		if r := b.RTT(size); r > 0 && (best == 0 || r < best) {
			best = r
		}
	}
	return best
}

// Baseline is the unloaded RTT as a function of message size, built from
// samples taken one RPC at a time. See the package documentation for how
// it interpolates. The zero value and nil have no data: RTT returns 0.
type Baseline struct {
	sizes []float64       // representative size of each bin, ascending
	rtts  []time.Duration // median RTT of each bin
}

// NewBaseline groups the samples' sizes into log-spaced bins and keeps the
// median size and median RTT of each. Samples with a size below 1 or an
// RTT that is not positive are ignored.
func NewBaseline(samples []Sample) *Baseline {
	bins := make(map[int][]Sample)
	for _, s := range samples {
		if s.Size < 1 || s.RTT <= 0 {
			continue
		}
		k := baselineBin(s.Size)
		bins[k] = append(bins[k], s)
	}
	keys := make([]int, 0, len(bins))
	for k := range bins {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := &Baseline{}
	for _, k := range keys {
		size, rtt := binMedians(bins[k])
		b.sizes = append(b.sizes, size)
		b.rtts = append(b.rtts, rtt)
	}
	return b
}

// baselineBin returns the index of the log-spaced bin holding size.
func baselineBin(size int) int {
	return int(math.Floor(math.Log10(float64(size)) * BaselineBinsPerDecade))
}

// binMedians returns the (lower) median size and the (lower) median RTT
// of a non-empty bin. Taking both the same way keeps the point on the
// curve when RTT is a non-decreasing function of size.
func binMedians(bin []Sample) (float64, time.Duration) {
	sizes := make([]int, len(bin))
	rtts := make([]time.Duration, len(bin))
	for i, s := range bin {
		sizes[i], rtts[i] = s.Size, s.RTT
	}
	slices.Sort(sizes)
	slices.Sort(rtts)
	mid := (len(bin) - 1) / 2
	return float64(sizes[mid]), rtts[mid]
}

// Points returns the baseline's points, one per non-empty bin: the median
// size and median RTT, ascending in size.
func (b *Baseline) Points() []Sample {
	if b == nil {
		return nil
	}
	pts := make([]Sample, len(b.sizes))
	for i := range b.sizes {
		pts[i] = Sample{Size: int(b.sizes[i]), RTT: b.rtts[i]}
	}
	return pts
}

// RTT returns the estimated unloaded round-trip time of a message of the
// given size, or 0 if the baseline has no data.
func (b *Baseline) RTT(size int) time.Duration {
	if b == nil || len(b.sizes) == 0 {
		return 0
	}
	x := float64(max(size, 1))
	n := len(b.sizes)
	if x <= b.sizes[0] || n == 1 {
		// Flat below the first point; a single point is all there is.
		return b.rtts[0]
	}
	if x >= b.sizes[n-1] {
		return b.extrapolate(x)
	}
	// First point at or above x; x is strictly inside (sizes[0], sizes[n-1]).
	i, _ := slices.BinarySearch(b.sizes, x)
	x0, x1 := b.sizes[i-1], b.sizes[i]
	y0, y1 := float64(b.rtts[i-1]), float64(b.rtts[i])
	t := (math.Log(x) - math.Log(x0)) / (math.Log(x1) - math.Log(x0))
	return time.Duration(math.Round(y0 + t*(y1-y0)))
}

// extrapolate continues the last segment linearly in size beyond the
// largest point, never downward.
func (b *Baseline) extrapolate(x float64) time.Duration {
	n := len(b.sizes)
	x0, x1 := b.sizes[n-2], b.sizes[n-1]
	y0, y1 := float64(b.rtts[n-2]), float64(b.rtts[n-1])
	slope := max((y1-y0)/(x1-x0), 0)
	y := y1 + slope*(x-x1)
	if y >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(y))
}
