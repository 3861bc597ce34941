package resend

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestRTT(t *testing.T) {
	var e RTT
	if e.Timeout() != 0 || e.Smoothed() != 0 {
		t.Fatalf("no samples: timeout %v, smoothed %v", e.Timeout(), e.Smoothed())
	}
	e.Sample(40 * time.Millisecond)
	if e.Smoothed() != 40*time.Millisecond || e.Timeout() != 120*time.Millisecond {
		t.Fatalf("first sample 40ms: smoothed %v, timeout %v; want 40ms, 120ms", e.Smoothed(), e.Timeout())
	}
	for range 100 {
		e.Sample(40 * time.Millisecond)
	}
	if s, to := e.Smoothed(), e.Timeout(); s != 40*time.Millisecond || to != 50*time.Millisecond {
		t.Fatalf("steady 40ms: smoothed %v, timeout %v; want 40ms, 50ms (a quarter more)", s, to)
	}
	e.Sample(10 * time.Second) // clamped
	if to := e.Timeout(); to != MaxRTT {
		t.Fatalf("after a 10 s sample: timeout %v, want MaxRTT", to)
	}
	var z RTT
	z.Sample(-time.Second) // a clock step backwards counts as 0
	if z.Smoothed() != 0 {
		t.Fatalf("negative sample: smoothed %v", z.Smoothed())
	}
}

// TestRTTBounds: whatever the samples, the smoothed round trip stays
// within their range and the timeout within [smoothed, MaxRTT].
func TestRTTBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		samples := rapid.SliceOfN(rapid.Int64Range(0, int64(2*MaxRTT)), 1, 50).Draw(t, "samples")
		var e RTT
		lo, hi := MaxRTT, time.Duration(0)
		for _, s := range samples {
			d := min(time.Duration(s), MaxRTT)
			lo, hi = min(lo, d), max(hi, d)
			e.Sample(time.Duration(s))
		}
		if s := e.Smoothed(); s < lo || s > hi {
			t.Fatalf("smoothed %v outside the samples' range [%v, %v]", s, lo, hi)
		}
		if to := e.Timeout(); to < e.Smoothed() || to > MaxRTT {
			t.Fatalf("timeout %v outside [%v, %v]", to, e.Smoothed(), MaxRTT)
		}
	})
}

func TestStretch(t *testing.T) {
	c := Config{ResendTicks: 3}.Stretch(10)
	if c != (Config{ResendTicks: 10, ResendInterval: 10, TimeoutResends: DefaultTimeoutResends}) {
		t.Fatalf("Stretch(10) = %+v", c)
	}
	if c := (Config{}).Stretch(2); c != (Config{}).WithDefaults() {
		t.Fatalf("Stretch below the floor changed %+v", c)
	}
}
