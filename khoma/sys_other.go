//go:build !linux

package khoma

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
)

// Open opens a kernel Homa socket. The Homa module exists for Linux
// only; elsewhere Open returns an error matching ErrNoKernelHoma and
// errors.ErrUnsupported.
func Open(addr netip.AddrPort, server bool) (*Socket, error) {
	return nil, fmt.Errorf("%w: %s: %w", ErrNoKernelHoma, runtime.GOOS, errors.ErrUnsupported)
}
