package resend

import (
	"testing"

	"pgregory.net/rapid"
)

// TestBackoffCoversWait: an unneeded RESEND doubles the timing until
// its delay is longer than the wait it reports, and Reset restores it.
func TestBackoffCoversWait(t *testing.T) {
	cfg := Config{}
	var b Backoff
	if got := cfg.Apply(&b); got != cfg.WithDefaults() {
		t.Fatalf("no backoff: %+v, want %+v", got, cfg.WithDefaults())
	}
	if b.Spurious(4, &cfg) {
		t.Fatal("a wait shorter than the delay changed the timing")
	}
	steps := []struct {
		waited          uint64
		level           int
		delay, interval int
	}{
		{5, 1, 10, 10},      // BUSY after the first RESEND: twice the delay
		{10, 2, 20, 20},     // and again
		{30, 3, 40, 40},     // a longer wait covered at once
		{7, 3, 40, 40},      // a shorter one changes nothing
		{100, 5, 160, 128},  // the interval bounded first
		{300, 8, 256, 128},  // then the delay
		{5000, 8, 256, 128}, // and no further
	}
	for _, s := range steps {
		b.Spurious(s.waited, &cfg)
		got := cfg.Apply(&b)
		if b.Level() != s.level || got.ResendTicks != s.delay || got.ResendInterval != s.interval {
			t.Fatalf("after a wait of %d: level %d, delay %d, interval %d; want %d, %d, %d",
				s.waited, b.Level(), got.ResendTicks, got.ResendInterval, s.level, s.delay, s.interval)
		}
		if got.TimeoutResends != DefaultTimeoutResends {
			t.Fatalf("TimeoutResends %d changed", got.TimeoutResends)
		}
	}
	if !b.Reset() || b.Reset() || cfg.Apply(&b) != cfg.WithDefaults() {
		t.Fatalf("Reset left %+v", cfg.Apply(&b))
	}
	if cfg.Apply(nil) != cfg.WithDefaults() {
		t.Fatal("a nil Backoff changed the timing")
	}
}

// TestBackoffBounds: whatever the waits reported, the backed-off timing
// is never shorter than the configured one, and never longer than the
// bounds unless the configuration is.
func TestBackoffBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			ResendTicks:    rapid.IntRange(0, 2000).Draw(t, "ticks"),
			ResendInterval: rapid.IntRange(0, 2000).Draw(t, "interval"),
		}
		plain := cfg.WithDefaults()
		var b Backoff
		for _, w := range rapid.SliceOf(rapid.Uint64()).Draw(t, "waits") {
			b.Spurious(w, &cfg)
			got := cfg.Apply(&b)
			if got.ResendTicks < plain.ResendTicks || got.ResendInterval < plain.ResendInterval {
				t.Fatalf("timing %+v shorter than the configured %+v", got, plain)
			}
			if got.ResendTicks > max(plain.ResendTicks, MaxBackoffTicks) ||
				got.ResendInterval > max(plain.ResendInterval, MaxBackoffInterval) {
				t.Fatalf("timing %+v beyond the bounds", got)
			}
			if b.Level() > MaxBackoff {
				t.Fatalf("level %d", b.Level())
			}
		}
	})
}
