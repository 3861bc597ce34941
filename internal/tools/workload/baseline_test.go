package workload

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const us = time.Microsecond

func TestBaselineHandExample(t *testing.T) {
	b := NewBaseline([]Sample{
		{100, 9 * us}, {100, 10 * us}, {100, 11 * us}, {120, 12 * us},
		{10000, 20 * us}, {10000, 30 * us},
		{0, time.Second}, {50, 0}, {50, -us}, // ignored
	})
	want := []Sample{{100, 10 * us}, {10000, 20 * us}}
	if got := b.Points(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Points() = %v, want %v", got, want)
	}
	cases := []struct {
		size int
		want time.Duration
	}{
		{-3, 10 * us}, {1, 10 * us}, {50, 10 * us}, {100, 10 * us},
		{1000, 15 * us},  // halfway in log(size)
		{10000, 20 * us}, // a point
		// Beyond the last point: the last segment's slope in size,
		// 10us per 9900 bytes, for 10000 more bytes.
		{20000, 30101 * time.Nanosecond},
	}
	for _, c := range cases {
		if got := b.RTT(c.size); got != c.want {
			t.Errorf("RTT(%d) = %v, want %v", c.size, got, c.want)
		}
	}
}

func TestBaselineEmptyAndSingle(t *testing.T) {
	var nilBase *Baseline
	if nilBase.RTT(100) != 0 || NewBaseline(nil).RTT(100) != 0 || (&Baseline{}).RTT(5) != 0 {
		t.Error("a baseline without data should give 0")
	}
	if nilBase.Points() != nil {
		t.Error("nil baseline has points")
	}
	one := NewBaseline([]Sample{{100, 7 * us}, {100, 9 * us}})
	for _, s := range []int{1, 100, 1_000_000} {
		if got := one.RTT(s); got != 7*us {
			t.Errorf("single-point RTT(%d) = %v, want 7us", s, got)
		}
	}
	// Never downward beyond the last point, even if the last two fall.
	down := NewBaseline([]Sample{{100, 20 * us}, {10000, 10 * us}})
	if got := down.RTT(MaxMessage); got != 10*us {
		t.Errorf("RTT beyond a falling last segment = %v, want 10us", got)
	}
	huge := NewBaseline([]Sample{{1, 1}, {1000, time.Duration(math.MaxInt64 / 2)}})
	if got := huge.RTT(math.MaxInt); got != time.Duration(math.MaxInt64) {
		t.Errorf("overflowing extrapolation = %v, want the largest Duration", got)
	}
}

// TestBaselineMonotone: when the calibration RTT is a non-decreasing
// function of size, so is the baseline, and it passes through each bin's
// point.
func TestBaselineMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fixed := rapid.Float64Range(0, 100e3).Draw(t, "fixed ns")
		perByte := rapid.Float64Range(0, 10).Draw(t, "ns per byte")
		perLog := rapid.Float64Range(0, 5e3).Draw(t, "ns per log size")
		f := func(size int) time.Duration {
			x := float64(size)
			return time.Duration(1 + fixed + perByte*x + perLog*math.Log(x))
		}
		n := rapid.IntRange(1, 300).Draw(t, "n")
		var samples []Sample
		for i := range n {
			// Log-uniform sizes over 1..MaxMessage.
			e := rapid.Float64Range(0, 6).Draw(t, "log10 size "+string(rune('a'+i%26)))
			s := max(1, min(MaxMessage, int(math.Pow(10, e))))
			samples = append(samples, Sample{s, f(s)})
		}
		b := NewBaseline(samples)
		for _, p := range b.Points() {
			if b.RTT(p.Size) != p.RTT || p.RTT != f(p.Size) {
				t.Fatalf("RTT(%d) = %v, point %v, f %v", p.Size, b.RTT(p.Size), p.RTT, f(p.Size))
			}
		}
		prev := time.Duration(0)
		for x := 1.0; x <= 2*MaxMessage; x *= 1.07 {
			got := b.RTT(int(x))
			if got < prev {
				t.Fatalf("RTT(%d) = %v below RTT of a smaller size %v", int(x), got, prev)
			}
			prev = got
		}
	})
}

// TestFastest: at each size, the shortest RTT of the baselines that have
// data there; slowdowns over it share one denominator.
func TestFastest(t *testing.T) {
	small := NewBaseline([]Sample{{100, 10 * us}, {10000, 40 * us}}) // fast for short messages
	large := NewBaseline([]Sample{{100, 20 * us}, {10000, 30 * us}}) // fast for long ones
	f := Fastest(small, nil, NewBaseline(nil), large)
	for _, c := range []struct {
		size int
		want time.Duration
	}{{50, 10 * us}, {100, 10 * us}, {10000, 30 * us}, {20000, large.RTT(20000)}} {
		if got := f.RTT(c.size); got != c.want {
			t.Errorf("Fastest RTT(%d) = %v, want %v", c.size, got, c.want)
		}
	}
	if got := Fastest().RTT(100); got != 0 {
		t.Errorf("Fastest of none = %v, want 0", got)
	}
	// The same RTTs over small's own baseline and over the fastest:
	// equal where small is the fastest, larger where it is not.
	samples := []Sample{{100, 20 * us}, {10000, 60 * us}}
	own := Summarize(samples, []int{100, 10000}, small)
	over := Summarize(samples, []int{100, 10000}, f)
	if own[0].Slowdown50 != 2 || over[0].Slowdown50 != 2 || own[1].Slowdown50 != 1.5 || over[1].Slowdown50 != 2 {
		t.Errorf("slowdowns own %v, over the fastest %v; want 2, 1.5 and 2, 2", own, over)
	}
	if got := Summarize(samples, nil, nil); got[0].Slowdown50 != 0 || got[0].Count != 2 {
		t.Errorf("Summarize without a baseline = %+v", got)
	}
}
