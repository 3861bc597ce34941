//go:build !linux

package netio

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
)

// OpenRaw opens a raw IP protocol 146 Conn. It is implemented on Linux
// only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func OpenRaw(laddr netip.Addr, port uint16, opt *Options) (Conn, error) {
	return nil, fmt.Errorf("netio: raw Homa sockets on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// OpenUDP opens a UDP-encapsulated Homa Conn. It is implemented on Linux
// only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func OpenUDP(laddr netip.Addr, port uint16, opt *Options) (Conn, error) {
	return nil, fmt.Errorf("netio: UDP Homa sockets on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
