package homa

import (
	"sync/atomic"
	"time"
)

// Polling: a goroutine waiting in Recv that reads the socket itself
// spins on non-blocking reads for a while before it parks in the
// netpoller, since waking a parked thread costs microseconds (tens on a
// virtual machine). Spinning trades CPU for latency, and pays only when
// what the reader waits for comes soon. So the time a reader spins
// adapts to how long the endpoint's readers have waited lately (a moving
// average): a reader spins for twice that, up to PollDuration, and not at
// all when the waits are longer than PollDuration. A client waiting for a
// response that takes a round trip spins until it comes; a server whose
// requests come seldom parks at once, and spends no CPU spinning.

// Polling selects how a reader spins (Config.Polling).
type Polling uint8

const (
	// PollAdaptive spins for an adaptive time up to PollDuration, then
	// parks. The default.
	PollAdaptive Polling = iota
	// PollAlways always spins for PollDuration after the last packet
	// before it parks: the lowest latency, a core's worth of CPU while
	// waiting.
	PollAlways
	// PollNever parks at once: the least CPU, a wake-up per message.
	PollNever
)

// spinBudget is the adaptive spin time, shared by the endpoint's readers.
type spinBudget struct {
	max  time.Duration
	mode Polling
	// avg is the moving average of recent waits in nanoseconds, the
	// newest weighing 1/8.
	avg atomic.Int64
}

func (s *spinBudget) init(cfg Config) {
	s.max, s.mode = cfg.PollDuration, cfg.Polling
	if s.max <= 0 {
		s.mode = PollNever
	}
	s.avg.Store(int64(s.max / 4))
}

// budget is how long a reader spins now.
func (s *spinBudget) budget() time.Duration {
	switch s.mode {
	case PollNever:
		return 0
	case PollAlways:
		return s.max
	}
	avg := time.Duration(s.avg.Load())
	if avg > s.max {
		return 0
	}
	return min(2*avg, s.max)
}

// waited records how long a reader waited for its message.
func (s *spinBudget) waited(d time.Duration) {
	if s.mode != PollAdaptive {
		return
	}
	d = min(d, 4*s.max) // a long idle spell counts as long, not as forever
	old := s.avg.Load()
	s.avg.Store(old + (int64(d)-old)/8)
}
