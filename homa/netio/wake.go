package netio

import (
	"errors"
	"sync/atomic"
)

// Waker is an optional Conn capability: Wake makes a ReadBatch or
// WaitReadable that is parked waiting for packets return at once with
// ErrWoken (or, when none is parked, the next one to park), so that a
// goroutine that reads the socket itself, instead of handing that to
// another goroutine, can still be told that something else needs it.
// Wake may be called from any goroutine; wakes before a read coalesce.
type Waker interface {
	Wake()
}

// Shared is an optional Conn capability: Shared reports that the Conn
// may receive what concerns other Conns (a member of a group of sockets
// on one port, which gets ICMP reports about its siblings' peers and
// passes them on), so it must be read even while its own endpoint has
// nothing in progress.
type Shared interface {
	Shared() bool
}

// ErrWoken is what ReadBatch and WaitReadable return when Wake
// interrupted them, with no packets read.
var ErrWoken = errors.New("netio: read interrupted by Wake")

// wakeFlag is the pending-wake state shared by a Conn's Wake and its
// readers.
type wakeFlag struct{ pending atomic.Bool }

// set records a wake; it reports whether none was pending.
func (w *wakeFlag) set() bool { return !w.pending.Swap(true) }

// take consumes a pending wake.
func (w *wakeFlag) take() bool { return w.pending.Swap(false) }
