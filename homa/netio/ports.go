package netio

import (
	"errors"
	"sync/atomic"
)

// numClientPorts is the size of the client port range.
const numClientPorts = MaxPort - MinClientPort + 1

// portCursor is where the search for a free client port starts, as an
// offset into the client range: just past the port this process was
// given last. Searching from MinClientPort every time made the k-th
// client socket of a process try k ports first (5,000 opens took over
// a minute); from the cursor, a process that has not run through the
// whole range finds a free port at the first try.
var portCursor atomic.Uint32

// findClientPort calls take for the client ports in turn, from the
// cursor and wrapping around the range once, until take succeeds (the
// port is the caller's) or fails with an error other than ErrPortInUse.
func findClientPort(take func(port uint16) error) (uint16, error) {
	start := portCursor.Load()
	for i := range uint32(numClientPorts) {
		off := (start + i) % numClientPorts
		port := uint16(MinClientPort + off)
		err := take(port)
		if err == nil {
			portCursor.Store((off + 1) % numClientPorts)
			return port, nil
		}
		if !errors.Is(err, ErrPortInUse) {
			return 0, err
		}
	}
	return 0, ErrNoPorts
}
