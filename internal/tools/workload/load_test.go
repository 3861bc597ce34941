package workload

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRatePerSecond(t *testing.T) {
	if got := RatePerSecond(Fixed(1250), 10); got != 1000 {
		t.Errorf("RatePerSecond(1250 B, 10 Mbit/s) = %v, want 1000", got)
	}
	w1 := mustNamed(t, "w1")
	if got, want := RatePerSecond(w1, 1000), 1e9/8/w1.Mean(); !relClose(got, want, 1e-12) {
		t.Errorf("RatePerSecond(w1, 1000) = %v, want %v", got, want)
	}
	for _, load := range []float64{0, -1, math.NaN()} {
		if got := RatePerSecond(w1, load); got != 0 {
			t.Errorf("RatePerSecond(w1, %v) = %v, want 0", load, got)
		}
	}
}

// TestNextGap checks the mean of the gaps and the exponential shape: the
// share of gaps longer than the mean is 1/e.
func TestNextGap(t *testing.T) {
	const n, rate = 100_000, 2000.0
	r := rand.New(rand.NewPCG(7, 7))
	var sum float64
	longer := 0
	mean := float64(time.Second) / rate
	for range n {
		g := NextGap(r, rate)
		if g < 0 {
			t.Fatalf("negative gap %v", g)
		}
		sum += float64(g)
		if float64(g) > mean {
			longer++
		}
	}
	// The standard error of the mean of n exponentials is mean/sqrt(n).
	if got := sum / n; math.Abs(got-mean) > 4.5*mean/math.Sqrt(n) {
		t.Errorf("mean gap %v, want %v", time.Duration(got), time.Duration(mean))
	}
	p := math.Exp(-1)
	if got := float64(longer) / n; math.Abs(got-p) > 4.5*math.Sqrt(p*(1-p)/n) {
		t.Errorf("share of gaps above the mean %.4f, want %.4f", got, p)
	}
	for _, bad := range []float64{0, -5, math.NaN()} {
		if g := NextGap(r, bad); g != time.Duration(math.MaxInt64) {
			t.Errorf("NextGap(%v) = %v, want the largest Duration", bad, g)
		}
	}
	if g := NextGap(nil, 1e-300); g != time.Duration(math.MaxInt64) {
		t.Errorf("NextGap(tiny rate) = %v, want the largest Duration", g)
	}
}
