package homa

import (
	"testing"
	"time"
)

// TestSpinBudget: an adaptive reader spins for twice the recent waits,
// up to PollDuration; not at all once waits are longer than that; and
// again once they shorten (the waits of parked readers count too). The
// other modes do not adapt.
func TestSpinBudget(t *testing.T) {
	var s spinBudget
	s.init(Config{PollDuration: 50 * time.Microsecond})
	for range 100 {
		s.waited(10 * time.Microsecond)
	}
	if b := s.budget(); b < 18*time.Microsecond || b > 22*time.Microsecond {
		t.Fatalf("after 10 µs waits: budget %v, want about 20 µs", b)
	}
	for range 100 {
		s.waited(40 * time.Microsecond)
	}
	if b := s.budget(); b != 50*time.Microsecond {
		t.Fatalf("after 40 µs waits: budget %v, want PollDuration", b)
	}
	for range 100 {
		s.waited(time.Second) // a server idle between requests
	}
	if b := s.budget(); b != 0 {
		t.Fatalf("after long waits: budget %v, want none", b)
	}
	for range 100 {
		s.waited(5 * time.Microsecond)
	}
	if b := s.budget(); b == 0 || b > 12*time.Microsecond {
		t.Fatalf("once waits shortened again: budget %v, want about 10 µs", b)
	}
	s.init(Config{PollDuration: 50 * time.Microsecond, Polling: PollAlways})
	s.waited(time.Second)
	if b := s.budget(); b != 50*time.Microsecond {
		t.Fatalf("PollAlways: budget %v", b)
	}
	for _, cfg := range []Config{{PollDuration: 50 * time.Microsecond, Polling: PollNever}, {PollDuration: -1}} {
		s.init(cfg)
		s.waited(time.Microsecond)
		if b := s.budget(); b != 0 {
			t.Fatalf("%+v: budget %v, want none", cfg, b)
		}
	}
}
