package homa

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// Polling: a goroutine waiting in Recv that reads the socket itself
// spins on non-blocking reads for a while before it parks in the
// netpoller, since waking a parked thread costs microseconds (tens on a
// virtual machine). Spinning trades CPU for latency, and pays only when
// what the reader waits for comes soon.
//
// By default (PollAlways) every reader spins for PollDuration after each
// sign of activity, as Linux Homa polls (50 µs): an idle endpoint spins
// for at most that long after its last packet, and a server whose
// requests come seldom spends that much CPU on each. PollAdaptive saves
// that CPU on servers: a client waiting for the response of an RPC it
// sent expects it within a round trip and the server's work, so it spins
// as above, but a goroutine waiting for any message (a server waiting
// for requests) cannot know when the next comes, so whether it spins
// adapts to whether spinning has paid lately: a score goes up when a reader's message came while it spun,
// and down twice as fast when it spun its whole budget in vain. While
// the score is not negative such readers spin; otherwise they park at
// once, except one in probeEvery, which spins to find out whether
// spinning pays again (a parked reader learns nothing: its wait includes
// its own wake-up). A probe spins probeLength times PollDuration: when
// both ends have parked, each waits for the other's wake-up, which on a
// virtual machine takes longer than PollDuration, so a probe of
// PollDuration would never catch the next request; one that outlasts
// the client's wake-up does, and the client, whose response then comes
// at once, catches it while it spins, and both spin again. A server
// answering a client that sends its next request at once spins and
// catches it; a server whose requests come seldom parks at once, and
// spends one probe in probeEvery waits.
//
// A client's wait for a response includes the server's work on the
// request, which grows with its length: copying a 1 MB request into the
// application and a 1 MB response out takes hundreds of microseconds.
// A client that parked after PollDuration would then need a thread
// wake-up for the response, and a server that parked meanwhile another
// for the grants of the response: 1 MB echoes between two processes
// took 1.9-2.4 ms with the client spinning PollDuration, 0.84 ms
// spinning 2 ms. So a client spins dueSpinPerByte longer per byte of
// its request. The same holds the other way: a client that echoes,
// checks or copies a 1 MB response takes hundreds of microseconds before
// its next request, and a server parked meanwhile needs a wake-up for
// it, which on two busy virtual CPUs can wait for a scheduler tick (1
// ms and more). So a server waiting for requests spins dueSpinPerByte
// longer per byte of the last request it received: 1 MB echoes between
// two processes took 460-490 µs (median) instead of 700-1,050 µs, for
// less CPU per RPC.
//
// That the client side always spins matters: if both sides adapted on
// their own, each would see the other's wake-ups in its waits, and both
// would settle on parking, at two thread wake-ups per RPC. Even so, on
// two virtual CPUs a server that adapts misses requests often enough
// that RPCs one at a time between two processes took 19-27 µs and 68-115
// µs of CPU each with PollAdaptive, against 15-21 µs and 52-71 µs with
// PollAlways (homa bench --polling); with many RPCs outstanding both
// gave the same rate. So PollAlways is the default. With the engine of
// 2026-11-27 (turns of 335 ns) the two are closer, 6.1 µs and 16.7-19.7
// µs of CPU against 5.9-6.0 µs and 14.3-16.0, and PollNever, a wake-up
// per message, takes 54-59 µs and 72-77 µs of CPU.

// Polling selects how a reader spins (Config.Polling).
type Polling uint8

const (
	// PollAlways spins for PollDuration after the last packet before it
	// parks, as Linux Homa polls: the lowest latency; a reader that
	// waits longer spends PollDuration of CPU before it parks. The
	// default.
	PollAlways Polling = iota
	// PollAdaptive spins for PollDuration while waiting for a response,
	// and while waiting for any message only as long as spinning pays
	// (see above): less CPU on servers whose requests come seldom.
	PollAdaptive
	// PollNever parks at once: the least CPU, a wake-up per message.
	PollNever
)

// spinBudget decides how long readers spin, shared by the endpoint's
// readers (one at a time: the holder of rxTok).
type spinBudget struct {
	max  time.Duration
	mode Polling
	// score counts recent spins that paid (+1) against those that did
	// not (-2), within [minScore, maxScore].
	score atomic.Int32
	// parks counts readers that parked without spinning.
	parks atomic.Uint32
	// served is the length of the last request delivered to the
	// application: a reader waiting for any message spins longer after a
	// long one.
	served atomic.Int64
	// yieldEvery is how many turns of a spinning reader pass between
	// yields of its processor (see spinRead).
	yieldEvery uint32
}

// Yields of a spinning reader: rarely on a kernel socket, so that timers
// and goroutines readied on its processor still run; at every turn on a
// Conn whose packets goroutines of this process deliver, or when there
// is only one processor.
const (
	yieldRarely = 16
	yieldAlways = 1
)

// dueSpinPerByte is how much longer a client spins for a response per
// byte of its request: 1 ms for a 1 MB request, a few times what the
// server's copies of it take.
const dueSpinPerByte = time.Nanosecond

const (
	maxScore    = 8
	minScore    = -8
	probeEvery  = 16
	probeLength = 4
)

func (s *spinBudget) init(cfg Config, conn netio.Conn) {
	s.max, s.mode = cfg.PollDuration, cfg.Polling
	if s.max <= 0 {
		s.mode = PollNever
	}
	s.score.Store(0)
	s.parks.Store(0)
	s.served.Store(0)
	s.yieldEvery = yieldRarely
	if ip, ok := conn.(netio.InProcess); (ok && ip.InProcess()) || runtime.GOMAXPROCS(0) == 1 {
		s.yieldEvery = yieldAlways
	}
}

// budget is how long a reader spins now, after each sign of activity;
// due says it waits for the response of an RPC it sent, whose request
// was request bytes long. A reader waiting for any message spins longer
// after a long request (served).
func (s *spinBudget) budget(due bool, request int) time.Duration {
	switch {
	case s.mode == PollNever:
		return 0
	case due:
		return s.max + time.Duration(request)*dueSpinPerByte
	}
	served := time.Duration(s.served.Load()) * dueSpinPerByte
	switch {
	case s.mode == PollAlways, s.score.Load() >= 0:
		return s.max + served
	case s.parks.Add(1)%probeEvery == 0:
		return probeLength*s.max + served
	}
	return 0
}

// spun records how the spin of a reader waiting for any message ended
// (due is false): paid when its message came while it spun, not when it
// spun its whole budget in vain.
func (s *spinBudget) spun(due, paid bool) {
	if s.mode != PollAdaptive || due {
		return
	}
	old := s.score.Load()
	if paid {
		s.score.Store(min(old+1, maxScore))
	} else {
		s.score.Store(max(old-2, minScore))
	}
}
