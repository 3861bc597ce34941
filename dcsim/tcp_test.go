package dcsim

import "testing"

func TestBaselineEndToEnd(t *testing.T) {
	for _, w := range []string{"w2", "w4"} {
		r, err := Run(small(w, 0.5), "dctcp")
		if err != nil {
			t.Fatal(err)
		}
		if r.Messages < 100 || r.Incomplete != 0 || r.Failed != 0 {
			t.Errorf("%s: %d messages, %d incomplete, %d failed; want >= 100, 0, 0", w, r.Messages, r.Incomplete, r.Failed)
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
	r, err := Run(cfg, "dctcp")
	if err != nil {
		t.Fatal(err)
	}
	if r.Drops == 0 || r.Retransmits == 0 || r.Incomplete != 0 {
		t.Errorf("%d drops, %d retransmits, %d incomplete; want drops recovered", r.Drops, r.Retransmits, r.Incomplete)
	}
}
