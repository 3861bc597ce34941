package netio

import (
	"errors"
	"testing"
)

// TestFindClientPort: the search for a client port starts past the port
// given last, so that the k-th of k sockets opened one after another
// takes one try, not k; it wraps around the range, skips the ports in
// use, stops at another error, and reports ErrNoPorts when every port is
// taken.
func TestFindClientPort(t *testing.T) {
	defer portCursor.Store(portCursor.Load())
	portCursor.Store(0)
	taken := map[uint16]bool{}
	tries := 0
	take := func(p uint16) error {
		tries++
		if taken[p] {
			return ErrPortInUse
		}
		taken[p] = true
		return nil
	}
	for k := range 5000 {
		tries = 0
		p, err := findClientPort(take)
		if err != nil || p != uint16(MinClientPort+k) || tries != 1 {
			t.Fatalf("open %d: port %d, %v after %d tries; want port %d at the first try", k, p, err, tries, MinClientPort+k)
		}
	}
	// Freed ports are found again once the search wraps around.
	delete(taken, MinClientPort+10)
	portCursor.Store(numClientPorts - 1)
	taken[MaxPort] = true
	if p, err := findClientPort(take); err != nil || p != MinClientPort+10 {
		t.Fatalf("after the wrap: port %d, %v; want the freed %d", p, err, MinClientPort+10)
	}
	for p := MinClientPort; p <= MaxPort; p++ {
		taken[uint16(p)] = true
	}
	if _, err := findClientPort(take); !errors.Is(err, ErrNoPorts) {
		t.Fatalf("every port taken: %v, want ErrNoPorts", err)
	}
	boom := errors.New("boom")
	if _, err := findClientPort(func(uint16) error { return boom }); err != boom {
		t.Fatalf("a failing take: %v, want its error", err)
	}
}
