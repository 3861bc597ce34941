package core

import (
	"errors"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
)

func dropReasonOf(err error) contract.DropReason {
	if errors.Is(err, wire.ErrShort) {
		return contract.DropShort
	}
	return contract.DropUnknownType
}

// numTypes covers every packet type byte from DATA (0x10) to ACK (0x18).
const numTypes = int(wire.TypeAck-wire.TypeData) + 1

func typeIndex(t wire.Type) int { return int(t - wire.TypeData) }

// TypeIndex maps a packet type to 0..NumTypes-1 (for counters by type);
// ok is false for a byte that is not a Homa type.
func TypeIndex(t wire.Type) (i int, ok bool) {
	i = typeIndex(t)
	return i, i >= 0 && i < numTypes
}

// NumTypes is the number of packet types TypeIndex maps.
const NumTypes = numTypes

// counters are the core's statistics. The core is driven by one caller
// at a time, so they are plain integers, read by Stats under the same
// serialization.
type counters struct {
	rxPackets, rxBytes [numTypes]uint64
	Drops              [contract.NumDropReasons]uint64
	DuplicatePackets   uint64
	GrantsSent         uint64
	Retransmits        uint64
	ResentPackets      uint64
	RPCsStarted        uint64
	RPCsCompleted      uint64
	RPCsAborted        uint64
	RPCTimeouts        uint64
	ServerRPCsStarted  uint64
	RequestsReceived   uint64
	ServerRPCsFreed    uint64
	ResendsSent        uint64
	NeedAcksSent       uint64
	NeedAcksDeferred   uint64
	TimersRun          uint64
	PeerTimeouts       uint64
	Reclaimed          uint64
	ServersUnreachable uint64
	CutoffsSent        uint64
	Shed               uint64
	GrantsRevoked      uint64
	GrantsDeferred     uint64
	ResendsIgnored     uint64
	PeersEvicted       uint64
	PeersExpired       uint64
	Recalled           uint64
	RecallsLapsed      uint64
	SeenExpired        uint64
	SeenEvicted        uint64
	Unreachable        uint64
	RTTSamples         uint64
	ResendsDeferred    uint64
	ResendsUnneeded    uint64
	LandedPackets      uint64
	MovedPackets       uint64

	hist histograms
}

func (s *counters) init() { s.hist.init() }

// countRx counts a received packet of type t and n bytes.
func (s *counters) countRx(t wire.Type, n int) {
	i := typeIndex(t)
	s.rxPackets[i]++
	s.rxBytes[i] += uint64(n)
}

// Stats returns a snapshot of the core's counters and state. The
// transmit counters (TxPackets, TxBytes, TxPriority) and I/O errors are
// the shell's to fill.
func (c *Core) Stats() contract.Stats {
	k := &c.stats
	s := contract.Stats{
		RxPackets:          make(map[wire.Type]uint64),
		RxBytes:            make(map[wire.Type]uint64),
		TxPackets:          make(map[wire.Type]uint64),
		TxBytes:            make(map[wire.Type]uint64),
		Drops:              make(map[contract.DropReason]uint64),
		DuplicatePackets:   k.DuplicatePackets,
		LandedPackets:      k.LandedPackets,
		MovedPackets:       k.MovedPackets,
		GrantsSent:         k.GrantsSent,
		Retransmits:        k.Retransmits,
		ResentPackets:      k.ResentPackets,
		ResendsIgnored:     k.ResendsIgnored,
		RPCsStarted:        k.RPCsStarted,
		RPCsCompleted:      k.RPCsCompleted,
		RPCsAborted:        k.RPCsAborted,
		RPCTimeouts:        k.RPCTimeouts,
		RPCsUnreachable:    k.Unreachable,
		ServerRPCsStarted:  k.ServerRPCsStarted,
		RequestsReceived:   k.RequestsReceived,
		ServerRPCsFreed:    k.ServerRPCsFreed,
		ResendsSent:        k.ResendsSent,
		NeedAcksSent:       k.NeedAcksSent,
		NeedAcksDeferred:   k.NeedAcksDeferred,
		TimersRun:          k.TimersRun,
		PeerTimeouts:       k.PeerTimeouts,
		Reclaimed:          k.Reclaimed,
		ServersUnreachable: k.ServersUnreachable,
		RTTSamples:         k.RTTSamples,
		ResendsDeferred:    k.ResendsDeferred,
		ResendsUnneeded:    k.ResendsUnneeded,
		CutoffsSent:        k.CutoffsSent,
		Shed:               k.Shed,
		GrantsRevoked:      k.GrantsRevoked,
		GrantsDeferred:     k.GrantsDeferred,
		PeersEvicted:       k.PeersEvicted,
		PeersExpired:       k.PeersExpired,
		Recalled:           k.Recalled,
		RecallsLapsed:      k.RecallsLapsed,
		SeenExpired:        k.SeenExpired,
		SeenEvicted:        k.SeenEvicted,
		SeenClients:        len(c.seen.m),
		SpareRPCs:          len(c.freeRPCs),
		ClientRPCs:         len(c.clients),
		ServerRPCs:         c.servers.len(),
		Peers:              len(c.peers),
		RecvMemory:         c.mem,
		IncomingRPCs:       c.incoming,
		PendingReplies:     c.pending,
		Grants:             c.sched.Stats(),
	}
	for i := range k.rxPackets {
		if k.rxPackets[i] > 0 {
			t := wire.TypeData + wire.Type(i)
			s.RxPackets[t] = k.rxPackets[i]
			s.RxBytes[t] = k.rxBytes[i]
		}
	}
	for i, v := range k.Drops {
		if v > 0 {
			s.Drops[contract.DropReason(i)] = v
		}
	}
	if c.pacer != nil {
		s.Pacer = c.pacer.Stats()
	}
	for i := range k.hist.latency {
		s.Latency[i] = k.hist.latency[i].snapshot()
	}
	for d := range k.hist.sizes {
		for j := range k.hist.sizes[d] {
			s.MessageSizes[d][j] = k.hist.sizes[d][j].snapshot()
		}
	}
	sz := &s.MessageSizes
	s.RequestBytesSent = sz[contract.Sent][contract.Request].Sum
	s.RequestBytesReceived = sz[contract.Received][contract.Request].Sum
	s.ResponseBytesSent = sz[contract.Sent][contract.Response].Sum
	s.ResponseBytesReceived = sz[contract.Received][contract.Response].Sum
	s.ServerRPCsCompleted = sz[contract.Sent][contract.Response].Count
	return s
}
