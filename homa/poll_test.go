package homa

import (
	"testing"
	"time"
)

// TestSpinBudget: an adaptive reader waiting for any message spins for
// PollDuration while requests come close together, stretches its spin
// to twice the average gap when they keep step a little farther apart
// than that, parks at once when they come farther apart than stretchCap
// spins, and spins again once they quicken, whether it spun or parked
// meanwhile. One waiting for a response always spins, stretched alike
// to its recent waits. The other modes do not adapt.
func TestSpinBudget(t *testing.T) {
	const max = 50 * time.Microsecond
	var s spinBudget
	s.init(Config{PollDuration: max, Polling: PollAdaptive}, nil)
	if b := s.budget(false, 0); b != max {
		t.Fatalf("at first: budget %v, want PollDuration", b)
	}
	now := time.Duration(0)
	arrive := func(n int, gap time.Duration) {
		for range n {
			now += gap
			s.arrived(now)
		}
	}
	arrive(100, 20*time.Microsecond) // back to back
	if b := s.budget(false, 0); b != max {
		t.Fatalf("requests 20 µs apart: budget %v, want PollDuration", b)
	}
	arrive(1, 10*time.Millisecond) // one pause: neither parking nor stretching
	if b := s.budget(false, 0); b != max {
		t.Fatalf("requests 20 µs apart, one pause: budget %v, want PollDuration", b)
	}
	arrive(40, 1500*time.Microsecond) // at random, 673 a second
	if b := s.budget(false, 0); b != 0 {
		t.Fatalf("requests 1.5 ms apart: budget %v, want none", b)
	}
	arrive(40, 70*time.Microsecond) // two parked ends in step
	if b := s.budget(false, 0); b < 130*time.Microsecond || b > 150*time.Microsecond {
		t.Fatalf("requests 70 µs apart: budget %v, want twice the gap", b)
	}
	for range 40 { // as many as close, but at random: no stretching
		arrive(1, 10*time.Microsecond)
		arrive(1, 130*time.Microsecond)
	}
	if b := s.budget(false, 0); b != max {
		t.Fatalf("requests 10 and 130 µs apart in turn: budget %v, want PollDuration", b)
	}
	arrive(60, 20*time.Microsecond) // the requests quicken
	if b := s.budget(false, 0); b != max {
		t.Fatalf("requests 20 µs apart again: budget %v, want PollDuration", b)
	}
	// A reader waiting for a response spins whatever the gaps, and
	// stretches its spin to its recent waits, up to the cap.
	if b := s.budget(true, 0); b != max {
		t.Fatalf("waiting for a response: budget %v, want PollDuration", b)
	}
	for range 40 {
		s.waited(130 * time.Microsecond)
	}
	if b := s.budget(true, 0); b != stretchCap*max {
		t.Fatalf("responses after 130 µs: budget %v, want the cap", b)
	}
	for range 40 {
		s.waited(2 * time.Millisecond)
	}
	if b := s.budget(true, 0); b != max {
		t.Fatalf("responses after 2 ms: budget %v, want PollDuration (not worth stretching)", b)
	}
	// The longer the request, the longer the server's work on it: a
	// client spins longer for its response.
	if b := s.budget(true, 1_000_000); b != max+time.Millisecond {
		t.Fatalf("waiting for the response to 1 MB: budget %v, want PollDuration + 1 ms", b)
	}
	s.init(Config{PollDuration: max, Polling: PollAlways}, nil)
	arrive(40, 1500*time.Microsecond) // no parking, no stretching
	if b := s.budget(false, 0); b != max {
		t.Fatalf("PollAlways: budget %v", b)
	}
	if b := s.budget(true, 2000); b != max+2*time.Microsecond {
		t.Fatalf("PollAlways, waiting for the response to 2,000 bytes: budget %v", b)
	}
	// The longer the last request, the longer its client takes to send
	// the next: a server spins longer for it, and shorter again after a
	// short one.
	s.served.Store(1_000_000)
	if b := s.budget(false, 0); b != max+time.Millisecond {
		t.Fatalf("PollAlways, after a 1 MB request: budget %v, want PollDuration + 1 ms", b)
	}
	s.served.Store(100)
	if b := s.budget(false, 0); b != max+100*time.Nanosecond {
		t.Fatalf("PollAlways, after a 100-byte request: budget %v, want PollDuration + 100 ns", b)
	}
	for _, cfg := range []Config{{PollDuration: max, Polling: PollNever}, {PollDuration: -1}} {
		s.init(cfg, nil)
		if b := s.budget(false, 0); b != 0 {
			t.Fatalf("%+v: budget %v, want none", cfg, b)
		}
	}
}

// TestPostponeBound: due timers wait for the readers only while the last
// read filled its batch, and never more than maxPostpone past their time.
func TestPostponeBound(t *testing.T) {
	e := &Endpoint{timerAt: 10 * time.Millisecond}
	for _, tc := range []struct {
		behind bool
		now    time.Duration
		want   bool
	}{
		{false, 10 * time.Millisecond, false},
		{true, 10 * time.Millisecond, true},
		{true, 10*time.Millisecond + maxPostpone - 1, true},
		{true, 10*time.Millisecond + maxPostpone, false},
		{false, 10*time.Millisecond + maxPostpone - 1, false},
	} {
		e.behind = tc.behind
		if got := e.postpone(tc.now); got != tc.want {
			t.Errorf("behind %v, %v past due: postpone %v, want %v", tc.behind, tc.now-e.timerAt, got, tc.want)
		}
	}
}
