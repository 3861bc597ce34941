//go:build !linux

package rawfloor

import (
	"errors"
	"net/netip"
)

// socket is a stand-in: the floor is measured on Linux only.
type socket struct{}

func openSocket(netip.Addr, match) (*socket, error) {
	return nil, errors.ErrUnsupported
}

func (*socket) recv(_, _, _ []byte) (int, error) { return 0, errBusy }
func (*socket) send(_, _ []byte) error           { return errors.ErrUnsupported }
func (*socket) close() error                     { return nil }

type batchIO struct{}

func newBatchIO() *batchIO { return nil }

func (*socket) recvBatch(*batchIO, [][]byte, []int) int { return 0 }
func (*socket) sendBatch(*batchIO, [][]byte, [][]byte) (int, error) {
	return 0, errors.ErrUnsupported
}
