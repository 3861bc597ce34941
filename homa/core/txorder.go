package core

import "slices"

// The order of transmission. Each call into the core appends the packets
// it produced to Output.Packets, and the shell writes them in that order.
// Within a call packets are produced in the order of events: a batch
// whose GRANT lets a long message send 400 KB and whose RESEND asks a
// short message for one packet would put the short message's packet
// behind a few hundred of the long one's. So at the end of each call the
// core puts the packets the call produced in SRPT order (when they are
// not in it already):
//
//   - first every packet other than DATA (GRANT, RESEND, ACK, NEED_ACK,
//     BUSY, RPC_UNKNOWN, CUTOFFS), in the order they were produced;
//   - then DATA, message by message, the message with the fewest bytes
//     from the first byte the call sends of it to its end first, ties in
//     the order produced; a message's packets keep their order
//     (retransmissions before new bytes when both were produced so).
//
// Across calls nothing waits in the core when the pacer is off: every
// granted byte goes out in the call that allows it, so a short message
// sent later is written by its own call, not behind the long one's. With
// the pacer on (Config.LinkMbps), DATA waits in the pacer's queue, which
// sends the message with the fewest remaining bytes first, one segment at
// a time: a short message queued while a long one is paced out goes next.
// Retransmissions wait in it too (resendData), so a RESEND for much of a
// long message does not fill the link's budget ahead of a short one.

// txKey is what the order needs of a packet the call produced: its
// message (nil: not DATA), the message's length, and the packet's offset.
type txKey struct {
	msg    *rpc
	length uint32
	off    uint32
}

// txOrder is the call's record of the packets it produced.
type txOrder struct {
	start int     // the call's first packet in Output.Packets
	keys  []txKey // one per packet from start on
	last  *rpc    // the message of the last DATA packet produced
	mixed bool    // an order other than one message's DATA after control
	ranks []rank
	msgs  []txMsg
	tmp   []Packet
}

// txMsg is a message with DATA among the call's packets.
type txMsg struct {
	msg    *rpc
	first  int32
	length uint32
	minOff uint32
}

// txBegin starts the record of a call's packets.
func (c *Core) txBegin() {
	t := &c.tx
	t.start = len(c.out.Packets)
	clear(t.keys)
	t.keys, t.last, t.mixed = t.keys[:0], nil, false
}

// txControl records a packet other than DATA.
func (c *Core) txControl() {
	t := &c.tx
	t.mixed = t.mixed || t.last != nil
	t.keys = append(t.keys, txKey{})
}

// txData records a DATA packet of r at off.
func (c *Core) txData(r *rpc, off uint32) {
	t := &c.tx
	t.mixed = t.mixed || (t.last != nil && t.last != r)
	t.last = r
	t.keys = append(t.keys, txKey{msg: r, length: r.out.length, off: off})
}

// txEnd puts the call's packets in SRPT order (see above).
func (c *Core) txEnd() {
	t := &c.tx
	if pkts := c.out.Packets[min(t.start, len(c.out.Packets)):]; t.mixed && len(pkts) == len(t.keys) {
		c.txSort(pkts)
	}
	clear(t.keys) // do not keep RPCs reachable
	t.keys, t.last = t.keys[:0], nil
}

// txSort puts pkts, the call's packets, in SRPT order.
func (c *Core) txSort(pkts []Packet) {
	t := &c.tx
	ranks, msgs := t.ranks[:0], t.msgs[:0]
	for i, k := range t.keys {
		rk := rank{first: int32(i), idx: int32(i)}
		if k.msg != nil {
			j := slices.IndexFunc(msgs, func(m txMsg) bool { return m.msg == k.msg })
			if j < 0 {
				j = len(msgs)
				msgs = append(msgs, txMsg{msg: k.msg, first: int32(i), length: k.length, minOff: k.off})
			}
			msgs[j].minOff = min(msgs[j].minOff, k.off)
			rk.first, rk.rem = int32(j), 1
		}
		ranks = append(ranks, rk)
	}
	for i := range ranks {
		if rk := &ranks[i]; rk.rem != 0 {
			m := &msgs[rk.first]
			rk.rem, rk.first = remainingRank(m.length, m.minOff), m.first
		}
	}
	clear(msgs)
	t.ranks, t.msgs = ranks, msgs[:0]
	if slices.IsSortedFunc(ranks, cmpRank) {
		return
	}
	slices.SortFunc(ranks, cmpRank)
	t.tmp = append(t.tmp[:0], pkts...)
	for k, rk := range ranks {
		pkts[k] = t.tmp[rk.idx]
	}
	clear(t.tmp)
	t.tmp = t.tmp[:0]
}
