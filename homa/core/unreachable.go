package core

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
)

// Unreachability, as an ICMP destination-unreachable message reports it
// for a packet the endpoint sent.
type Unreachability uint8

const (
	// PortUnreachable: nothing listens on the Homa port at the peer.
	PortUnreachable Unreachability = iota + 1
	// ProtocolUnreachable: the peer host does not speak Homa at all.
	ProtocolUnreachable
	// HostUnreachable: the host or its network cannot be reached.
	HostUnreachable
)

// Unreachable reports that a packet sent to host dst was not delivered,
// for the reason why; quoted is the start of that packet as the ICMP
// message quoted it (at least the two ports). The client RPCs it
// concerns fail at once: with ErrNoListener for a port (or, on a host
// without Homa, every port), with ErrHostUnreachable for a host, as
// Linux Homa does. Server RPCs whose response it was are forgotten.
//
// ICMP is no more authenticated than Homa: a forged report ends RPCs as
// a forged RPC_UNKNOWN could (see docs/threat-model.md).
func (c *Core) Unreachable(why Unreachability, quoted []byte, dst netip.Addr, now time.Duration, out *Output) {
	if c.closed {
		return
	}
	c.begin(now, out)
	c.unreachable(why, quoted, c.canon(dst))
	c.end()
}

func (c *Core) unreachable(why Unreachability, quoted []byte, dst netip.Addr) {
	if len(quoted) < 4 || binary.BigEndian.Uint16(quoted) != c.port {
		c.drop(contract.DropOtherPort)
		return
	}
	port := binary.BigEndian.Uint16(quoted[2:])
	err := contract.ErrNoListener
	if why == HostUnreachable {
		err = contract.ErrHostUnreachable
	}
	// The quoted packet names its RPC when the whole common header came
	// back; a server's response then identifies one server RPC.
	if len(quoted) >= wire.CommonLen {
		id := binary.BigEndian.Uint64(quoted[20:])
		if id&1 == 1 {
			if r := c.servers.get(dst, id); r != nil && r.port == port {
				c.stats.ServersUnreachable++
				c.freeServer(r, true)
			}
			return
		}
	}
	for _, r := range c.clients {
		if r.peer.addr == dst && (r.port == port || why != PortUnreachable) {
			c.stats.Unreachable++
			c.fail(r, err)
		}
	}
}
