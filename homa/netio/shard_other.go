//go:build !linux

package netio

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
)

// MaxShards is the largest group OpenUDPGroup opens.
const MaxShards = 256

// OpenUDPGroup opens a group of UDP Conns sharing a port. It is
// implemented on Linux only; elsewhere it returns an error wrapping
// errors.ErrUnsupported.
func OpenUDPGroup(laddr netip.Addr, port uint16, n int, opt *Options) ([]Conn, error) {
	return nil, fmt.Errorf("netio: UDP Homa socket groups on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// OpenRawGroup opens a group of raw Conns sharing a port. It is
// implemented on Linux only; elsewhere it returns an error wrapping
// errors.ErrUnsupported.
func OpenRawGroup(laddr netip.Addr, port uint16, n int, opt *Options) ([]Conn, error) {
	return nil, fmt.Errorf("netio: raw Homa socket groups on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
