package netrpc

import (
	"errors"
	"sync/atomic"

	"github.com/homa-go/homa/sock"
)

// Drops counts the requests a server answered with an error without
// running them, and the messages it discarded, by reason.
type Drops struct {
	// Malformed: not a message of this package, or a part of a large
	// message that breaks the rules (part.go).
	Malformed uint64
	// TooLong: a request longer than Config.MaxMessage.
	TooLong uint64
	// Memory: a large request or reply refused for Config.LargeMemory
	// or LargeMemoryPerPeer.
	Memory uint64
	// Shutdown: requests and parts that arrived during Shutdown.
	Shutdown uint64
	// NoReply: pulls of a large reply the server does not hold (pulled
	// already, or dropped after Config.LargeTimeout).
	NoReply uint64
	// Responses: responses arriving at the server's socket.
	Responses uint64
}

// Total is the sum of the counts.
func (d Drops) Total() uint64 {
	return d.Malformed + d.TooLong + d.Memory + d.Shutdown + d.NoReply + d.Responses
}

// The causes of drops, which the errors sent back wrap.
var (
	errShuttingDown = errors.New("shutting down")
	errLargeMemory  = errors.New("out of memory for large messages")
	errNoReply      = errors.New("no large reply")
)

// dropCounters are a server's Drops, counted as they happen.
type dropCounters struct {
	malformed, tooLong, memory, shutdown, noReply atomic.Uint64
	responses                                     atomic.Uint64
}

// drop counts a request refused with err.
func (sh *serverShared) drop(err error) {
	d := &sh.drops
	switch {
	case errors.Is(err, sock.ErrMessageTooLong):
		d.tooLong.Add(1)
	case errors.Is(err, errLargeMemory):
		d.memory.Add(1)
	case errors.Is(err, errShuttingDown):
		d.shutdown.Add(1)
	case errors.Is(err, errNoReply):
		d.noReply.Add(1)
	default:
		d.malformed.Add(1)
	}
}

func (d *dropCounters) snapshot() Drops {
	return Drops{
		Malformed: d.malformed.Load(),
		TooLong:   d.tooLong.Load(),
		Memory:    d.memory.Load(),
		Shutdown:  d.shutdown.Load(),
		NoReply:   d.noReply.Load(),
		Responses: d.responses.Load(),
	}
}
