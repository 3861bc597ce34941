package khoma

import (
	"errors"
	"fmt"
	"syscall"
)

// The kernel writes each incoming message into the socket's receive
// buffer region, cut into HOMA_BPAGE_SIZE bpages: recvmsg reports the
// message's bpages by their offsets in the region. The application owns
// them until it gives them back, in the BpageOffsets of a later recvmsg
// (at most HOMA_MAX_BPAGES per call). Until then the kernel cannot reuse
// them; a page given back twice, or never, is a bug that either corrupts
// a later message or slowly starves the socket of buffer space.

// Errors of the bpage bookkeeping.
var (
	// ErrBadBpages means recvmsg described a message with bpages that do
	// not fit the region or the message length.
	ErrBadBpages = errors.New("khoma: message bpages do not fit the receive region")
	// ErrNotHeld means a bpage was given back that the application does
	// not hold (never received, or already given back).
	ErrNotHeld = errors.New("khoma: bpage not held by the application")
)

// Ledger tracks which bpages the application holds and which are waiting
// to go back to the kernel. The zero value is ready to use. It is not safe
// for concurrent use.
type Ledger struct {
	held     map[uint32]int // offset -> times held (a multiset)
	queue    []uint32       // done with; the kernel gets them back from the front
	inFlight int            // queue[:inFlight] are in the pending recvmsg args
	returned uint64         // pages the kernel took back
}

// Receive records that the kernel handed out the first n offsets of
// offsets (a recvmsg result). It fails with ErrBadBpages, recording
// nothing, when n is out of range.
func (l *Ledger) Receive(offsets []uint32) error {
	if len(offsets) > HOMA_MAX_BPAGES {
		return fmt.Errorf("%w: %d bpages, at most %d", ErrBadBpages, len(offsets), HOMA_MAX_BPAGES)
	}
	if l.held == nil {
		l.held = make(map[uint32]int)
	}
	for _, off := range offsets {
		l.held[off]++
	}
	return nil
}

// Done gives back offsets the application no longer needs; the next
// recvmsg calls return them to the kernel. It fails with ErrNotHeld,
// changing nothing, when any of them is not held.
func (l *Ledger) Done(offsets []uint32) error {
	for i, off := range offsets {
		need := 1
		for _, o := range offsets[:i] {
			if o == off {
				need++
			}
		}
		if l.held[off] < need {
			return fmt.Errorf("%w: offset %#x", ErrNotHeld, off)
		}
	}
	for _, off := range offsets {
		if l.held[off]--; l.held[off] == 0 {
			delete(l.held, off)
		}
		l.queue = append(l.queue, off)
	}
	return nil
}

// Fill prepares a for a recvmsg that receives any message: it clears the
// output fields and loads up to HOMA_MAX_BPAGES offsets waiting to be
// returned. Every Fill must be followed by Settle. It returns how many
// offsets it loaded.
func (l *Ledger) Fill(a *RecvmsgArgs) int {
	*a = RecvmsgArgs{}
	l.inFlight = copy(a.BpageOffsets[:], l.queue)
	a.NumBpages = uint32(l.inFlight)
	return l.inFlight
}

// Settle records the fate of the offsets the last Fill loaded: taken
// (see Taken) means the kernel has them back; otherwise they stay first
// in line for the next call.
func (l *Ledger) Settle(taken bool) {
	if taken && l.inFlight > 0 {
		n := copy(l.queue, l.queue[l.inFlight:])
		l.queue = l.queue[:n]
		l.returned += uint64(l.inFlight)
	}
	l.inFlight = 0
}

// Held is the number of bpages the application holds.
func (l *Ledger) Held() int {
	n := 0
	for _, c := range l.held {
		n += c
	}
	return n
}

// Queued is the number of bpages waiting to go back to the kernel.
func (l *Ledger) Queued() int { return len(l.queue) }

// Returned is the number of bpages the kernel has taken back.
func (l *Ledger) Returned() uint64 { return l.returned }

// Taken reports whether the kernel took the sent offsets it was given in
// a recvmsg that returned n and errno, with a the arguments as the call
// left them. The kernel releases the given bpages before it looks for a
// message, then sets NumBpages to 0 (or to the new message's count), and
// copies the arguments back whatever the outcome. The calls that fail
// before that (a bad control length, a bad address) copy nothing back, so
// NumBpages still equals sent.
func Taken(sent, n int, errno syscall.Errno, a *RecvmsgArgs) bool {
	switch {
	case sent == 0:
		return true
	case errno == 0 && n >= 0:
		return true // a message arrived: the kernel got past the release
	case a.ID != 0:
		return true // a failed RPC: likewise
	}
	return int(a.NumBpages) != sent
}

// MessageBpages is the number of bpages a message of length bytes
// occupies.
func MessageBpages(length int) int {
	return (length + HOMA_BPAGE_SIZE - 1) >> HOMA_BPAGE_SHIFT
}

// Gather copies the message of length bytes stored at offsets in region
// into dst (which must hold length bytes). Every bpage but the last is
// whole and aligned; the last holds the rest. Offsets that break these
// rules or leave the region give ErrBadBpages, and nothing is copied.
func Gather(dst, region []byte, offsets []uint32, length int) error {
	if err := checkBpages(len(region), offsets, length); err != nil {
		return err
	}
	if len(dst) < length {
		return fmt.Errorf("khoma: %d-byte buffer for a %d-byte message", len(dst), length)
	}
	pos := 0
	for _, off := range offsets {
		n := min(HOMA_BPAGE_SIZE, length-pos)
		pos += copy(dst[pos:pos+n], region[off:int(off)+n])
	}
	return nil
}

func checkBpages(regionLen int, offsets []uint32, length int) error {
	if length < 0 || length > HOMA_MAX_MESSAGE_LENGTH {
		return fmt.Errorf("%w: message length %d", ErrBadBpages, length)
	}
	if want := MessageBpages(length); len(offsets) != want {
		return fmt.Errorf("%w: %d bpages for %d bytes, want %d", ErrBadBpages, len(offsets), length, want)
	}
	for i, off := range offsets {
		n := min(HOMA_BPAGE_SIZE, length-i*HOMA_BPAGE_SIZE)
		last := i == len(offsets)-1
		if !last && off%HOMA_BPAGE_SIZE != 0 {
			return fmt.Errorf("%w: bpage %d at unaligned offset %#x", ErrBadBpages, i, off)
		}
		if int64(off)+int64(n) > int64(regionLen) {
			return fmt.Errorf("%w: bpage %d at %#x+%d beyond %d bytes", ErrBadBpages, i, off, n, regionLen)
		}
	}
	return nil
}
