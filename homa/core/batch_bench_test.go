package core_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/wire"
)

// batchBench feeds a server core batches of 16 packets as a read brings
// them: DATA of 1 MB requests from one client, 1444 bytes a packet, and,
// with mixed, a 100-byte request from another client as the last packet
// of every batch. Each complete request is answered with 100 bytes and
// acknowledged, so the core's state stays the same size. b.N counts
// batches.
func batchBench(b *testing.B, mixed bool) {
	const length, seg, batch = 1_000_000, 1444, 16
	c := core.New(core.Local{Port: 500}, core.Config{})
	var out core.Output
	hostA, hostB := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	pkt := func(id uint64, length, off, n int) []byte {
		d := wire.Data{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: id},
			MessageLength: uint32(length), Incoming: uint32(length), SegOffset: uint32(off), Payload: make([]byte, n)}
		return d.Append(nil)
	}
	// The packets of one long request and one short one, rewritten with
	// each RPC's id.
	var long [][]byte
	for off := 0; off < length; off += seg {
		long = append(long, pkt(0, length, off, min(seg, length-off)))
	}
	short := pkt(0, 100, 0, 100)
	setID := func(p []byte, id uint64) []byte {
		binary.BigEndian.PutUint64(p[20:28], id) // the common header's sender id
		return p
	}
	done := func(now time.Duration) {
		for _, m := range out.Messages {
			if err := c.Reply(m.Peer.Addr(), m.ID, make([]byte, 100), 1500, now, &out); err != nil {
				b.Fatal(err)
			}
			a := wire.Ack{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: m.ID ^ 1}}
			c.Handle(a.Append(nil), m.Peer.Addr(), now, &out)
			m.Release()
		}
		out.Reset()
	}
	in := make([]core.Inbound, 0, batch)
	var now time.Duration
	longID, shortID, next := uint64(2), uint64(4), 0
	b.ReportAllocs()
	for b.Loop() {
		in = in[:0]
		for len(in) < batch-1 || (!mixed && len(in) < batch) {
			if next == len(long) {
				next, longID = 0, longID+4
			}
			in = append(in, core.Inbound{Buf: setID(long[next], longID), Addr: hostA})
			next++
		}
		if mixed {
			shortID += 4
			in = append(in, core.Inbound{Buf: setID(short, shortID), Addr: hostB})
		}
		now += 20 * time.Microsecond
		c.HandleBatch(in, now, &out)
		done(now)
	}
	if st := c.Stats(); st.Drops[contract.DropMemory]+st.Drops[contract.DropLimit] > 0 {
		b.Fatalf("drops: %v", st.Drops)
	}
}

// BenchmarkBatchStream: batches of one message's packets.
func BenchmarkBatchStream(b *testing.B) { batchBench(b, false) }

// BenchmarkBatchMixed: batches of a long message's packets and a short
// request after them.
func BenchmarkBatchMixed(b *testing.B) { batchBench(b, true) }
