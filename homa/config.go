package homa

import (
	"time"

	"github.com/homa-go/homa/homa/core"
)

// Config tunes an Endpoint. The zero value of every field means the
// default, which follows the Linux implementation where it has one.
type Config struct {
	// Config is the protocol's configuration: unscheduled bytes, the
	// grant scheduler, pacing, priority cutoffs, the timers of loss
	// recovery and acknowledgment, and the resource limits (see
	// core.Config for each and its default).
	core.Config
	// MaxPacket, when positive, caps the size of every Homa packet
	// (header included), overriding the path MTU the Conn reports.
	MaxPacket int
	// Epoch is the origin of the endpoint's clock, which its core's
	// times count from; zero: when NewEndpoint runs. Endpoints whose
	// cores share a pacer's link (core.Config.Link) share it.
	Epoch time.Time
	// PollDuration is the longest a goroutine waiting in Recv spins on
	// the socket after the last packet before it parks in the netpoller.
	// Default 50 µs, Linux Homa's poll time; negative never spins.
	PollDuration time.Duration
	// Polling says whether to spin: PollAdaptive (the default) spins
	// waiting for a response, and on servers only while their requests
	// come close together; PollAlways spins for PollDuration after each
	// packet; PollNever parks at once.
	Polling Polling
}

// Defaults of the shell.
const (
	defaultPollDuration = 50 * time.Microsecond
)

func (c Config) withDefaults() Config {
	if c.PollDuration == 0 {
		c.PollDuration = defaultPollDuration
	}
	return c
}
