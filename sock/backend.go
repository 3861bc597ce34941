package sock

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/khoma"
)

// Backend selects what implements the Homa protocol under a Socket.
type Backend int

const (
	// Engine is this module's user-space implementation (package homa)
	// over raw IP or UDP, per Config.Transport. It is the default.
	Engine Backend = iota
	// Kernel is the Linux Homa kernel module (IPPROTO_HOMA sockets).
	// Open fails with ErrNoKernelHoma when the kernel lacks it.
	Kernel
	// Auto uses the kernel module when the running kernel has it and
	// Config.Transport is Raw, and the engine otherwise. The two cannot
	// both own IP protocol 146 on one host: the module handles every
	// incoming Homa packet, so an engine reading the protocol through a
	// raw socket beside it would see the module's traffic and the
	// module would react to the engine's RPCs, which it does not know.
	// Where the module is loaded, its sockets are the way to speak Homa
	// over IP. (UDP encapsulation never meets the module, and its peers
	// need the engine.)
	Auto
)

func (b Backend) String() string {
	switch b {
	case Engine:
		return "engine"
	case Kernel:
		return "kernel"
	case Auto:
		return "auto"
	}
	return fmt.Sprintf("Backend(%d)", int(b))
}

// ErrNoKernelHoma means the kernel has no Homa module (or the platform
// is not Linux): the Kernel backend cannot open a socket.
var ErrNoKernelHoma = contract.ErrNoKernelHoma

// backend is what a Socket runs on: the engine or the kernel module.
type backend interface {
	LocalAddr() netip.AddrPort
	Send(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error)
	Recv(ctx context.Context, id uint64) (*Message, error)
	Reply(peer netip.AddrPort, id uint64, data []byte) error
	Abort(id uint64) error
	Stats() Stats
	Close() error
}

// owner is a backend that can send from a buffer it takes over.
type owner interface {
	SendOwned(dst netip.AddrPort, data []byte, cookie uint64) (uint64, error)
	ReplyOwned(peer netip.AddrPort, id uint64, data []byte) error
}

var _ owner = engine{}

// borrower is a backend that can send from a buffer the caller keeps
// (see homa.Endpoint.SendBorrowed).
type borrower interface {
	SendBorrowed(dst netip.AddrPort, data []byte, cookie uint64) (uint64, homa.Borrow, error)
}

var _ borrower = engine{}

// batcher is a backend that sends several messages at once (see
// homa.Endpoint.SendBatch).
type batcher interface {
	SendBatch(reqs []contract.BatchRequest, ids []uint64) error
	ReplyBatch(rs []contract.BatchResponse) error
}

var _ batcher = engine{}

// describer is a backend that can describe its RPCs (see
// homa.Endpoint.Describe).
type describer interface {
	Describe(w io.Writer, limit int)
}

var _ describer = engine{}

// engine adapts a homa.Endpoint, which finds a server RPC by the
// client's host alone.
type engine struct{ *homa.Endpoint }

func (e engine) Reply(peer netip.AddrPort, id uint64, data []byte) error {
	return e.Endpoint.Reply(peer.Addr(), id, data)
}

func (e engine) ReplyOwned(peer netip.AddrPort, id uint64, data []byte) error {
	return e.Endpoint.ReplyOwned(peer.Addr(), id, data)
}

var _ backend = (*khoma.Socket)(nil)

// openKernel opens a kernel module socket; it receives requests when
// bound to a server port.
func openKernel(addr netip.AddrPort) (*Socket, error) {
	ks, err := khoma.Open(addr, addr.Port() != 0)
	if err != nil {
		return nil, fmt.Errorf("sock: open kernel Homa socket on %v: %w", addr, err)
	}
	return &Socket{b: ks, kind: Kernel}, nil
}
