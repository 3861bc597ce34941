//go:build !linux

package rawfloor

import (
	"errors"
	"net/netip"
)

// ipv4HeaderMax is the longest IPv4 header.
const ipv4HeaderMax = 60

// socket is a stand-in: the floor is measured on Linux only.
type socket struct{}

func openSocket(netip.Addr, uint32, uint32) (*socket, error) {
	return nil, errors.ErrUnsupported
}

func (*socket) poll([]byte) ([]byte, bool) { return nil, false }
func (*socket) send([]byte) error          { return errors.ErrUnsupported }
func (*socket) close() error               { return nil }
