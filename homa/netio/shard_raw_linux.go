//go:build linux

package netio

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"sync/atomic"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/internal/transport/sockfilter"
)

// OpenRawGroup opens n raw Conns (see OpenRaw) serving one Homa port,
// among which every packet from peer reaches Conn ShardOf(peer, n)
// only: each has a socket of its own, whose filter passes the packets
// to the port from its shard's peers. Port 0 takes a free client port.
// The kernel clones every Homa packet arriving over raw IP for each of
// the n sockets (a few hundred nanoseconds each) before the filters
// drop it in all but one, so a group of n costs the host's Homa
// traffic n-1 clones per packet more than one Conn. An ICMP report
// reaches every socket of the group; each Conn returns those about
// packets to its own shard's peers, and counts the others in
// ReportsDiscarded (their shard has its own copy). n must be
// 1..MaxShards.
func OpenRawGroup(laddr netip.Addr, port uint16, n int, opt *Options) ([]Conn, error) {
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("netio: %d shards (1..%d)", n, MaxShards)
	}
	laddr, err := checkLocal(laddr)
	if err != nil {
		return nil, err
	}
	v6 := laddr.Is6()
	lease, port, err := reservePort(v6, port)
	if err != nil {
		return nil, err
	}
	conns := make([]*sockConn, 0, n)
	for k := range n {
		filter, err := shardFilter(v6, port, n, k)
		var c *sockConn
		if err == nil {
			l := lease
			if k > 0 {
				l = nil
			}
			c, err = openRawSocket(laddr, port, filter, l, opt)
		} else if k == 0 {
			lease.release()
		}
		if err != nil {
			for _, c := range conns {
				c.Close() // conns[0] releases the lease
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	if n == 1 {
		return []Conn{conns[0]}, nil
	}
	out := make([]Conn, n)
	for k, c := range conns {
		out[k] = &rawShardConn{sockConn: c, k: k, n: n}
	}
	return out, nil
}

// shardFilter assembles the socket filter of shard k of n raw Conns on
// port: portFilter's test, then ShardOf(source address, Homa source
// port, n) == k. The source address is loaded relative to the network
// header (SKF_NET_OFF), which both families' raw sockets have.
func shardFilter(v6 bool, port uint16, n, k int) ([]unix.SockFilter, error) {
	const (
		accept = math.MaxUint32
		drop   = 0
	)
	prog := append(homaLenPrologue(v6),
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: homaHeaderLen, SkipFalse: 1},
		bpf.LoadIndirect{Off: dstPortOff, Size: 2},
	)
	// Drop now unless A (the destination port) is port; the jump's
	// targets are fixed below, once the program's length is known.
	portCheck := len(prog)
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port)},
		bpf.LoadIndirect{Off: 0, Size: 2}, // the Homa source port
		bpf.StoreScratch{Src: bpf.RegA, N: 0},
	)
	if v6 {
		prog = append(prog, sourceV6Folded()...)
	} else {
		prog = append(prog, sourceV4())
	}
	prog = append(prog,
		bpf.TAX{}, // X = the address
		bpf.LoadScratch{Dst: bpf.RegA, N: 0},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.TAX{},
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 16},
		bpf.ALUOpX{Op: bpf.ALUOpXor},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(n)},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(k), SkipFalse: 1},
		bpf.RetConstant{Val: accept},
		bpf.RetConstant{Val: drop},
	)
	last := len(prog) - 1
	// The length test's false branch and the port test's go to the
	// final drop.
	prog[len(homaLenPrologue(v6))] = bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: homaHeaderLen, SkipFalse: uint8(last - len(homaLenPrologue(v6)) - 1)}
	prog[portCheck] = bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipFalse: uint8(last - portCheck - 1)}
	return sockfilter.Assemble(prog)
}

// rawShardConn is Conn k of a raw group of n > 1 (OpenRawGroup). Its
// socket's filter passes only its shard's peers' packets, but the
// kernel gives every socket of the group a copy of each ICMP report: it
// drops those about packets to other shards' peers.
type rawShardConn struct {
	*sockConn
	k, n    int
	foreign atomic.Uint64 // reports dropped as another shard's
}

func (c *rawShardConn) ReadBatch(pkts []Packet) (int, error) {
	return c.own(pkts, c.sockConn.ReadBatch)
}

func (c *rawShardConn) TryReadBatch(pkts []Packet) (int, error) {
	return c.own(pkts, c.sockConn.TryReadBatch)
}

func (c *rawShardConn) ReadBorrowed(pkts []Packet) (int, error) {
	return c.own(pkts, c.sockConn.ReadBorrowed)
}

func (c *rawShardConn) TryReadBorrowed(pkts []Packet) (int, error) {
	return c.own(pkts, c.sockConn.TryReadBorrowed)
}

// own returns what read gives, less the reports about packets to other
// shards' peers, the rest in their order at the front of pkts (the
// dropped ones keep their buffers behind them).
func (c *rawShardConn) own(pkts []Packet, read func([]Packet) (int, error)) (int, error) {
	n, err := read(pkts)
	w := 0
	for i := range n {
		p := &pkts[i]
		if p.Unreachable != NotUnreachable && p.N >= 4 {
			dst := netip.AddrPortFrom(p.Addr, binary.BigEndian.Uint16(p.Buf[2:4]))
			if ShardOf(dst, c.n) != c.k {
				c.foreign.Add(1)
				continue
			}
		}
		pkts[w], pkts[i] = pkts[i], pkts[w]
		w++
	}
	return w, err
}

// Stats counts the reports dropped as other shards' as discarded.
func (c *rawShardConn) Stats() ConnStats {
	s := c.sockConn.Stats()
	s.ReportsDiscarded += c.foreign.Load()
	s.Reports -= min(s.Reports, c.foreign.Load())
	return s
}
