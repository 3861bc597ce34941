package workload

import (
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestPercentile(t *testing.T) {
	var hundred, thousand []time.Duration
	for i := 1; i <= 1000; i++ {
		if i <= 100 {
			hundred = append(hundred, time.Duration(i))
		}
		thousand = append(thousand, time.Duration(i))
	}
	cases := []struct {
		s    []time.Duration
		p    float64
		want time.Duration
	}{
		{hundred, 0.5, 50}, {hundred, 0.99, 99}, {hundred, 0.999, 100},
		{hundred, 0.01, 1}, {hundred, 0.011, 2}, {hundred, 0, 1}, {hundred, 1, 100},
		{hundred, -1, 1}, {hundred, 2, 100}, {hundred, math.NaN(), 1},
		{thousand, 0.999, 999}, {thousand, 0.99, 990}, {thousand, 0.5, 500},
		{hundred, 0.07, 7}, // 0.07 * 100 is 7.000000000000001 in floating point
		{[]time.Duration{7}, 0.5, 7}, {nil, 0.5, 0},
	}
	for _, c := range cases {
		if got := Percentile(c.s, c.p); got != c.want {
			t.Errorf("Percentile(len %d, %v) = %v, want %v", len(c.s), c.p, got, c.want)
		}
	}
}

// TestSummarizeHandExample checks buckets computed by hand. The baseline
// has points (10 B, 10us) and (100 B, 20us): flat below 10 B, and 10us
// per 90 B beyond 100 B, so 1000 B has a baseline of 120us.
func TestSummarizeHandExample(t *testing.T) {
	base := NewBaseline([]Sample{{10, 10 * us}, {100, 20 * us}})
	samples := []Sample{
		{5, 10 * us},     // slowdown 1
		{10, 30 * us},    // 3
		{100, 20 * us},   // 1, second bucket
		{8, 20 * us},     // 2
		{1000, 240 * us}, // 2, above every bound: last bucket
		{10, 40 * us},    // 4
		{100, 60 * us},   // 3
	}
	want := []Bucket{
		{MaxSize: 10, Fraction: 4.0 / 7, Count: 4,
			P50: 20 * us, P99: 40 * us, P999: 40 * us,
			Slowdown50: 2, Slowdown99: 4, Slowdown999: 4},
		{MaxSize: 100, Fraction: 1, Count: 3,
			P50: 60 * us, P99: 240 * us, P999: 240 * us,
			Slowdown50: 2, Slowdown99: 3, Slowdown999: 3},
	}
	got := Summarize(samples, []int{100, 10, 10}, base)
	if !bucketsEqual(got, want) {
		t.Errorf("Summarize =\n%+v\nwant\n%+v", got, want)
	}
	// Without a baseline the slowdowns are 0 and the rest is unchanged.
	for i := range want {
		want[i].Slowdown50, want[i].Slowdown99, want[i].Slowdown999 = 0, 0, 0
	}
	if got := Summarize(samples, []int{10, 100}, nil); !bucketsEqual(got, want) {
		t.Errorf("Summarize without baseline =\n%+v\nwant\n%+v", got, want)
	}
}

func bucketsEqual(a, b []Bucket) bool {
	return slices.EqualFunc(a, b, func(x, y Bucket) bool {
		fx, fy := x.Fraction, y.Fraction
		x.Fraction, y.Fraction = 0, 0
		return x == y && math.Abs(fx-fy) < 1e-12
	})
}

func TestSummarizeEdges(t *testing.T) {
	if got := Summarize(nil, []int{10, 20}, nil); len(got) != 2 || got[0].Count != 0 || got[1].Fraction != 0 || got[1].MaxSize != 20 {
		t.Errorf("Summarize(no samples) = %+v", got)
	}
	got := Summarize([]Sample{{5, us}, {50, 3 * us}}, nil, nil)
	if len(got) != 1 || got[0].MaxSize != 50 || got[0].Count != 2 || got[0].Fraction != 1 {
		t.Errorf("Summarize(no bounds) = %+v", got)
	}
}

// TestSummarizeEverySampleOnce checks, against a direct search, that each
// sample lands in exactly one bucket: the first whose bound covers it.
func TestSummarizeEverySampleOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bounds := rapid.SliceOfN(rapid.IntRange(1, 2000), 1, 12).Draw(t, "bounds")
		samples := rapid.SliceOf(rapid.Custom(func(t *rapid.T) Sample {
			return Sample{rapid.IntRange(0, 2500).Draw(t, "size"), time.Duration(rapid.IntRange(1, 1e6).Draw(t, "rtt"))}
		})).Draw(t, "samples")
		got := Summarize(samples, bounds, nil)
		sorted := slices.Compact(slices.Sorted(slices.Values(bounds)))
		counts := make([]int, len(sorted))
		members := make([][]time.Duration, len(sorted))
		for _, s := range samples {
			i := len(sorted) - 1
			for j, b := range sorted {
				if s.Size <= b {
					i = j
					break
				}
			}
			counts[i]++
			members[i] = append(members[i], s.RTT)
		}
		if len(got) != len(sorted) {
			t.Fatalf("%d buckets for %d distinct bounds", len(got), len(sorted))
		}
		total := 0
		for i, b := range got {
			total += b.Count
			if b.MaxSize != sorted[i] || b.Count != counts[i] {
				t.Fatalf("bucket %d = %+v, want bound %d count %d", i, b, sorted[i], counts[i])
			}
			if b.Count > 0 && (!slices.Contains(members[i], b.P50) || !slices.Contains(members[i], b.P99)) {
				t.Fatalf("bucket %d percentiles %v %v not among its RTTs", i, b.P50, b.P99)
			}
			if len(samples) > 0 && math.Abs(b.Fraction-float64(total)/float64(len(samples))) > 1e-12 {
				t.Fatalf("bucket %d fraction %v, want %v", i, b.Fraction, float64(total)/float64(len(samples)))
			}
		}
		if total != len(samples) {
			t.Fatalf("buckets hold %d samples of %d", total, len(samples))
		}
	})
}
