package homa_test

import (
	"net/netip"
	"testing"

	"github.com/homa-go/homa/contract/contracttest"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
)

// endpointSocket is an Endpoint in the shape of the contract's Socket,
// whose Reply names the client's host and port.
type endpointSocket struct{ *homa.Endpoint }

func (e endpointSocket) Reply(peer netip.AddrPort, id uint64, data []byte) error {
	return e.Endpoint.Reply(peer.Addr(), id, data)
}

// TestContract: the engine returns the contract's errors as the kernel
// backend does (khoma.TestContract).
func TestContract(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 9})
	t.Cleanup(func() { nw.Close() })
	contracttest.Errors(t, func(t *testing.T, port uint16) contracttest.Socket {
		c, err := nw.Open(netip.MustParseAddr("10.0.0.1"), port)
		if err != nil {
			t.Fatal(err)
		}
		return endpointSocket{homa.NewEndpoint(c, homa.Config{})}
	})
}
