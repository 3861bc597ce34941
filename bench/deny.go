package bench

import (
	"fmt"
	"net/netip"

	"github.com/homa-go/homa/internal/tools/rawfloor"
	"github.com/homa-go/homa/sock"
)

// DenyRaw makes every raw socket bench opens (Homa's and the floor's)
// fail as it does without CAP_NET_RAW, until restore is called: for the
// tests of a program built on bench, on a host where they would
// succeed. It is not safe to call while a run is under way.
func DenyRaw() (restore func()) {
	orig, origFloor, origRate := openSocket, openFloorPair, openRateFloor
	openSocket = func(a netip.AddrPort, cfg *sock.Config) (*sock.Socket, error) {
		if cfg.Transport == sock.Raw {
			return nil, fmt.Errorf("sock: open raw socket on %v: %w", a, sock.ErrPermission)
		}
		return orig(a, cfg)
	}
	openFloorPair = func(a netip.Addr) (*rawfloor.Pair, error) {
		return nil, fmt.Errorf("open floor on %v: %w", a, rawfloor.ErrPermission)
	}
	openRateFloor = func(a netip.Addr, _ int) (*rawfloor.Rate, error) {
		return nil, fmt.Errorf("open rate floor on %v: %w", a, rawfloor.ErrPermission)
	}
	return func() { openSocket, openFloorPair, openRateFloor = orig, origFloor, origRate }
}
