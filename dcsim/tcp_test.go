package dcsim

import (
	"testing"
	"time"
)

func TestBaselineEndToEnd(t *testing.T) {
	for _, w := range []string{"w2", "w4"} {
		r, err := Run(small(w, 0.5), "dctcp")
		if err != nil {
			t.Fatal(err)
		}
		if r.Messages < 50 || r.Incomplete != 0 || r.Failed != 0 {
			t.Errorf("%s: %d messages, %d incomplete, %d failed; want >= 50, 0, 0", w, r.Messages, r.Incomplete, r.Failed)
		}
		if r.MinSlowdown < 1 || r.P99 < r.P50 {
			t.Errorf("%s: slowdown min %.3f, p50 %.3f, p99 %.3f", w, r.MinSlowdown, r.P50, r.P99)
		}
	}
}

// TestBaselineRecovers: with tiny buffers the baseline loses segments
// and still delivers every message, by retransmission.
func TestBaselineRecovers(t *testing.T) {
	cfg := small("w4", 0.7)
	cfg.BufferBytes = 20_000
	cfg.Drain = 50 * time.Millisecond // long messages need their timeouts
	r, err := Run(cfg, "dctcp")
	if err != nil {
		t.Fatal(err)
	}
	if r.Drops == 0 || r.Retransmits == 0 || r.Incomplete != 0 {
		t.Errorf("%d drops, %d retransmits, %d incomplete; want drops recovered", r.Drops, r.Retransmits, r.Incomplete)
	}
}

// TestBaselineIdle: alone in the fabric, a 100 KB flow's window opens
// faster than the link drains it, so it runs near the line rate.
func TestBaselineIdle(t *testing.T) {
	cfg := small("fixed:100000", 0.01)
	cfg.Duration = 20 * time.Millisecond
	r, err := Run(cfg, "dctcp")
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages == 0 || r.MinSlowdown < 1 || r.P99 > 1.2 || r.Retransmits != 0 {
		t.Errorf("%d messages, slowdown min %.4f p99 %.4f, %d retransmits; want slowdowns in [1, 1.2] and none",
			r.Messages, r.MinSlowdown, r.P99, r.Retransmits)
	}
}
