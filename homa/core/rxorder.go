package core

import (
	"net/netip"
	"slices"

	"github.com/homa-go/homa/homa/wire"
)

// The order of a received batch. Grants and priorities give the network
// SRPT; inside the endpoint a batch of packets is handled in turn, and a
// short message whose packet came after a run of a long message's DATA
// would wait for every one of them to be copied and accounted. So
// HandleBatch handles a batch in SRPT order rather than arrival order:
//
//   - first every packet that is not DATA (GRANT, RESEND, ACK, NEED_ACK,
//     BUSY, RPC_UNKNOWN, CUTOFFS, ICMP reports, anything malformed), in
//     arrival order: each is little work, and what it starts (a
//     retransmission, DATA a GRANT lets go) should not wait;
//   - then the DATA packets, message by message, the message with the
//     fewest bytes from its first packet in the batch to its end first
//     (its remaining bytes, as far as the batch shows them), ties in
//     arrival order; a message's packets keep their arrival order.
//   - but a client's RESEND for its response keeps its place among the
//     DATA of its request, when the batch brings any: a server whose
//     process did not run for a while finds the request and the RESENDs
//     that followed it in one batch, and a RESEND handled before the
//     request would find no RPC and ask the client for its request
//     (once per RESEND), which the client would then send again. After
//     the request, it finds the RPC and is answered BUSY. Packets are
//     sent once the whole batch is handled, so the answer waits for
//     nothing.
//
// A message the batch completes is thus delivered before the core copies
// the packets of any message with more bytes to go, and messages the
// batch completes reach Output.Messages shortest remaining first. The
// rank is taken from the packets alone, with no lookup: a peer can make
// its own packets look short, which gains it a place in one batch, no
// more than sending short messages would.

// rank is a packet's place in the order of a batch, received (see
// above) or transmitted (txorder.go).
type rank struct {
	rem   uint32 // 0 for packets other than DATA; else the message's remaining bytes, plus 1
	first int32  // the index of the message's first packet in the batch
	idx   int32  // the packet's index in the batch
}

func cmpRank(a, b rank) int {
	switch {
	case a.rem != b.rem:
		return cmpU32(a.rem, b.rem)
	case a.first != b.first:
		return int(a.first - b.first)
	}
	return int(a.idx - b.idx)
}

func cmpU32(a, b uint32) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// rxMsg is a message with DATA in a batch: who sends it, its length and
// the lowest offset the batch brings of it.
type rxMsg struct {
	addr   netip.Addr
	id     uint64
	port   uint16
	first  int32
	length uint32
	minOff uint32
}

// rxOrder returns the order in which to handle pkts (indexes into it),
// or nil to handle them as they came: a batch of one, or one already in
// order (the common case of a stream of one message's packets). The
// slice is the core's scratch, valid until the next call.
func (c *Core) rxOrder(pkts []Inbound) []rank {
	if len(pkts) < 2 {
		return nil
	}
	ranks, msgs := c.rxRanks[:0], c.rxMsgs[:0]
	var d wire.Data
	for i := range pkts {
		p := &pkts[i]
		rk := rank{first: int32(i), idx: int32(i)}
		if _, err := d.Parse(p.Buf); p.Unreachable != 0 || err != nil { // not DATA, or malformed
			ranks = append(ranks, rk)
			continue
		}
		k := rxFind(msgs, p.Addr, d.SenderID, d.SrcPort)
		off := d.Offset()
		if k < 0 {
			k = len(msgs)
			msgs = append(msgs, rxMsg{addr: p.Addr, id: d.SenderID, port: d.SrcPort, first: int32(i), length: d.MessageLength, minOff: off})
		}
		m := &msgs[k]
		m.minOff = min(m.minOff, off)
		rk.first = int32(k) // the message's number for now; its rank below
		rk.rem = 1
		ranks = append(ranks, rk)
	}
	d.Payload = nil
	c.rxRanks, c.rxMsgs = ranks, msgs
	if len(msgs) == 0 {
		return nil
	}
	for i := range ranks {
		rk := &ranks[i]
		if rk.rem != 0 {
			m := &msgs[rk.first]
			rk.rem, rk.first = remainingRank(m.length, m.minOff), m.first
		} else if k := requestOf(msgs, &pkts[i]); k >= 0 {
			m := &msgs[k]
			rk.rem, rk.first = remainingRank(m.length, m.minOff), m.first
		}
	}
	clear(c.rxMsgs) // do not keep addresses' zones reachable
	if slices.IsSortedFunc(ranks, cmpRank) {
		return nil
	}
	slices.SortFunc(ranks, cmpRank)
	return ranks
}

// requestOf returns the index in msgs of the request that p, if it is a
// client's RESEND, asks about the response to, or -1.
func requestOf(msgs []rxMsg, p *Inbound) int {
	var c wire.Common
	if p.Unreachable != 0 || wire.ParseCommon(p.Buf, &c) != nil || c.Type != wire.TypeResend || c.SenderID&1 != 0 {
		return -1
	}
	return rxFind(msgs, p.Addr, c.SenderID, c.SrcPort)
}

// rxFind returns the index in msgs of the message of RPC id from
// addr:port, or -1. The last message is tried first: a batch is mostly
// runs of one message's packets.
func rxFind(msgs []rxMsg, addr netip.Addr, id uint64, port uint16) int {
	for k := len(msgs) - 1; k >= 0; k-- {
		m := &msgs[k]
		if m.id == id && m.port == port && m.addr == addr {
			return k
		}
	}
	return -1
}

// remainingRank is the rank of a message of length bytes whose batch
// starts at off: its bytes from there on, plus 1 (never 0, which ranks
// packets other than DATA).
func remainingRank(length, off uint32) uint32 {
	if off >= length || length == ^uint32(0) {
		return 1 // malformed: it is dropped at once
	}
	return length - off + 1
}
