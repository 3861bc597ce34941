package homa

import (
	"testing"
	"time"
)

// TestSpinBudget: an adaptive reader waiting for any message spins for
// PollDuration while spinning pays; once spins go in vain it parks at
// once, but for one probe in probeEvery, and spins again once probes
// pay. One waiting for a response always spins. The other modes do not
// adapt.
func TestSpinBudget(t *testing.T) {
	const max = 50 * time.Microsecond
	var s spinBudget
	s.init(Config{PollDuration: max, Polling: PollAdaptive}, nil)
	if b := s.budget(false, 0); b != max {
		t.Fatalf("at first: budget %v, want PollDuration", b)
	}
	for range 100 {
		s.spun(false, true)
	}
	s.spun(false, false) // one miss among hits changes nothing
	if b := s.budget(false, 0); b != max {
		t.Fatalf("while spinning pays: budget %v, want PollDuration", b)
	}
	for range 20 {
		s.spun(false, false) // a server idle between requests
	}
	spins := 0
	for range 10 * probeEvery {
		if b := s.budget(false, 0); b != 0 {
			if b != probeLength*max {
				t.Fatalf("probe budget %v, want %d x PollDuration", b, probeLength)
			}
			spins++
			s.spun(false, false)
		}
	}
	if spins != 10 {
		t.Fatalf("after vain spins: %d of %d readers spun, want one in %d", spins, 10*probeEvery, probeEvery)
	}
	// Probes that pay bring spinning back.
	for range 100 * probeEvery {
		if s.budget(false, 0) != 0 {
			s.spun(false, true)
		}
	}
	if b := s.budget(false, 0); b != max {
		t.Fatalf("after paying probes: budget %v, want PollDuration", b)
	}
	// A reader waiting for a response spins whatever the score, and
	// its spins do not move it.
	for range 20 {
		s.spun(false, false)
	}
	for range 20 {
		if b := s.budget(true, 0); b != max {
			t.Fatalf("waiting for a response: budget %v, want PollDuration", b)
		}
		s.spun(true, true)
	}
	if s.score.Load() >= 0 {
		t.Fatal("spins waiting for responses moved the score")
	}
	// The longer the request, the longer the server's work on it: a
	// client spins longer for its response.
	if b := s.budget(true, 1_000_000); b != max+time.Millisecond {
		t.Fatalf("waiting for the response to 1 MB: budget %v, want PollDuration + 1 ms", b)
	}
	s.init(Config{PollDuration: max}, nil) // the default: PollAlways
	for range 20 {
		s.spun(false, false)
	}
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
		s.spun(false, true)
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
