package core

import (
	"bytes"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/wire"
)

// Landing tests: a 100,000-byte request from 10.0.0.2:40000 (RPC 2) in
// packets of landSeg bytes of payload; byte i of the message is
// landByte(i).
const (
	landLen = 100_000
	landSeg = 8000
)

var landClient = netip.MustParseAddr("10.0.0.2")

func landByte(i int) byte { return byte(i*7 + i>>8) }

// landData is the DATA packet of RPC id from srcPort carrying the
// message's bytes at [off, off+landSeg).
func landData(id uint64, srcPort uint16, off int) []byte {
	end := min(off+landSeg, landLen)
	payload := make([]byte, end-off)
	for i := range payload {
		payload[i] = landByte(off + i)
	}
	d := wire.Data{Common: wire.Common{SrcPort: srcPort, DstPort: 500, SenderID: id}, MessageLength: landLen,
		Incoming: landLen, SegOffset: wire.OffsetNone, Payload: payload}
	d.Ack = wire.AckEntry{}
	d.Common.Sequence = uint32(off)
	return d.Append(nil)
}

// read lands pkts in regions as a read does, slot by slot (a slot
// without a region reads its packet whole), and returns the batch.
func landRead(regions [][]byte, pkts ...[]byte) []Inbound {
	in := make([]Inbound, len(pkts))
	for i, p := range pkts {
		in[i] = Inbound{Buf: p, Addr: landClient}
		if i < len(regions) && len(p) > wire.DataLen {
			k := copy(regions[i], p[wire.DataLen:])
			buf := make([]byte, len(p)-k, len(p))
			copy(buf, p[:wire.DataLen])
			copy(buf[wire.DataLen:], p[wire.DataLen+k:])
			in[i].Buf, in[i].Land = buf, regions[i][:k]
		}
	}
	return in
}

// landFirst is where the packets after the first read of the request
// start: the read brings a quarter of it and a packet, the message has
// its buffer.
const landFirst = (landLen/4/landSeg + 2) * landSeg

// startLanding gives a server core the first read of the request and
// returns the core and its first loan.
func startLanding(t *testing.T, bufs contract.Buffers) (*Core, [][]byte) {
	t.Helper()
	c := New(Local{Port: 500, Buffers: bufs}, Config{})
	var out Output
	var pkts [][]byte
	for off := 0; off < landFirst; off += landSeg {
		pkts = append(pkts, landData(2, 40000, off))
	}
	c.HandleBatch(landRead(nil, pkts...), 0, &out)
	regions := make([][]byte, 16)
	n := c.Lend(regions)
	if n == 0 {
		t.Fatal("nothing lent once the message has its buffer")
	}
	return c, regions[:n]
}

// offsetIn returns the offset of region in the message's buffer whole,
// or -1 if it is not in it.
func offsetIn(whole, region []byte) int {
	off := cap(whole) - cap(region)
	if off < 0 || off >= len(whole) || &whole[off] != &region[0] {
		return -1
	}
	return off
}

func checkMessage(t *testing.T, data []byte) {
	t.Helper()
	if len(data) != landLen {
		t.Fatalf("message of %d bytes, want %d", len(data), landLen)
	}
	for i, b := range data {
		if b != landByte(i) {
			t.Fatalf("message byte %d is %#x, want %#x", i, b, landByte(i))
		}
	}
}

// TestLendLandsInPlace: the regions lent are the next packets' places
// in the message, the packets read into them are only marked received,
// and the message delivered is the buffer they landed in.
func TestLendLandsInPlace(t *testing.T) {
	c, regions := startLanding(t, nil)
	whole := c.servers.get(landClient, 3).in.whole
	next := landFirst // bytes received
	for i, r := range regions {
		if off := offsetIn(whole, r); off != next+i*landSeg || len(r) != min(landSeg, landLen-off) {
			t.Fatalf("region %d at %d, %d bytes; want %d, %d", i, off, len(r), next+i*landSeg, landSeg)
		}
	}
	var out Output
	var msg *contract.Message
	for next < landLen {
		var pkts [][]byte
		for off := next; off < landLen && len(pkts) < len(regions); off += landSeg {
			pkts = append(pkts, landData(2, 40000, off))
		}
		c.HandleBatch(landRead(regions, pkts...), 0, &out)
		next += len(pkts) * landSeg
		if len(out.Messages) > 0 {
			msg = out.Messages[0]
			break
		}
		out.Reset()
		regions = regions[:cap(regions)]
		regions = regions[:c.Lend(regions)]
		if len(regions) == 0 {
			t.Fatalf("nothing lent at %d of %d bytes", next, landLen)
		}
	}
	if msg == nil {
		t.Fatal("no message delivered")
	}
	checkMessage(t, msg.Data)
	if &msg.Data[0] != &whole[0] {
		t.Error("the message delivered is not the buffer its packets landed in")
	}
	s := c.Stats()
	if want := uint64((landLen - landFirst + landSeg - 1) / landSeg); s.LandedPackets != want || s.MovedPackets != 0 {
		t.Errorf("%d packets landed, %d moved; want %d, 0", s.LandedPackets, s.MovedPackets, want)
	}
}

// TestLendMisplaced: whatever lands where it does not belong (a
// packet naming the RPC from another port or host, the message's next
// packet but one, a packet longer than its region) is moved back behind
// its header and handled as if read whole; nothing it wrote into the
// region survives. The packet that belongs there, in the same slot,
// lands in place.
func TestLendMisplaced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pkt     []byte
		from    netip.Addr
		landed  bool
		foreign bool // not the message's: its bytes must not end up in it
	}{
		{"in place", landData(2, 40000, landFirst), landClient, true, false},
		{"another port", landData(2, 40001, landFirst), landClient, false, true},
		{"another host", landData(2, 40000, landFirst), netip.MustParseAddr("10.0.0.9"), false, true},
		{"the next but one", landData(2, 40000, landFirst+landSeg), landClient, false, false},
		{"longer than its region", append(landData(2, 40000, landFirst), make([]byte, 100)...), landClient, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, regions := startLanding(t, nil)
			if tc.foreign {
				for i := wire.DataLen; i < len(tc.pkt); i++ {
					tc.pkt[i] ^= 0xff
				}
			}
			in := landRead(regions, tc.pkt)
			in[0].Addr = tc.from
			var out Output
			c.HandleBatch(in, 0, &out)
			s := c.Stats()
			if landed := s.LandedPackets == 1; landed != tc.landed || s.LandedPackets+s.MovedPackets != 1 {
				t.Fatalf("%d packets landed, %d moved; want landed %v", s.LandedPackets, s.MovedPackets, tc.landed)
			}
			for off := landFirst; off < landLen; off += landSeg {
				c.Handle(landData(2, 40000, off), landClient, 0, &out)
			}
			var msgs []*contract.Message
			for _, m := range out.Messages {
				if m.Peer.Addr() == landClient && m.ID == 3 {
					msgs = append(msgs, m)
				}
			}
			if len(msgs) != 1 {
				t.Fatalf("%d messages of RPC 2 delivered, want 1", len(msgs))
			}
			checkMessage(t, msgs[0].Data)
		})
	}
}

// TestLoanOutlivesMessage: a message that ends while its buffer is on
// loan (its RPC freed) leaves the buffer to the loan, which gives it
// back to Buffers only once the read is handled; a message completed
// outside HandleBatch meanwhile is delivered as a copy.
func TestLoanOutlivesMessage(t *testing.T) {
	t.Run("freed", func(t *testing.T) {
		bufs := &trackingBuffers{put: map[*byte]bool{}}
		c, regions := startLanding(t, bufs)
		r := c.servers.get(landClient, 3)
		whole := unsafe.SliceData(r.in.whole)
		c.freeServer(r, false)
		if bufs.put[whole] {
			t.Fatal("the buffer on loan went back to Buffers when its message ended")
		}
		if s := c.Stats(); s.RecvMemory != 0 {
			t.Errorf("%d bytes of receive storage still counted for the message freed", s.RecvMemory)
		}
		var out Output
		c.HandleBatch(landRead(regions, landData(2, 40000, landFirst)), 0, &out)
		if !bufs.put[whole] {
			t.Fatal("the buffer on loan did not go back to Buffers when the loan ended")
		}
	})
	t.Run("completed", func(t *testing.T) {
		bufs := &trackingBuffers{put: map[*byte]bool{}}
		c, regions := startLanding(t, bufs)
		whole := unsafe.SliceData(c.servers.get(landClient, 3).in.whole)
		var out Output
		for off := landFirst; off < landLen; off += landSeg {
			c.Handle(landData(2, 40000, off), landClient, 0, &out)
		}
		if len(out.Messages) != 1 {
			t.Fatalf("%d messages delivered, want 1", len(out.Messages))
		}
		m := out.Messages[0]
		checkMessage(t, m.Data)
		if unsafe.SliceData(m.Data) == whole {
			t.Fatal("a message completed while its buffer was on loan was delivered in that buffer")
		}
		// The read lands garbage in the regions: the copy delivered
		// keeps its bytes, and the buffer goes back when the loan ends.
		junk := bytes.Repeat([]byte{0xee}, landSeg)
		for _, r := range regions {
			copy(r, junk)
		}
		out.Reset()
		c.HandleBatch(nil, 0, &out)
		checkMessage(t, m.Data)
		if !bufs.put[whole] {
			t.Fatal("the buffer on loan did not go back to Buffers when the loan ended")
		}
	})
}

// TestLendAcrossShortSegments: a sender cuts its last unscheduled
// segment short at its unscheduled limit (and its first one, on a path
// of 64 KB packets), and the packets after it are whole segments again:
// the regions lent follow the sender's segment, the longest payload of
// the run, and stop at the unscheduled limit, so that every packet of
// the message lands in place.
func TestLendAcrossShortSegments(t *testing.T) {
	const unsched = 30_000 // not a multiple of landSeg: [24000, 30000) is short
	packet := func(off, end int) []byte {
		payload := make([]byte, end-off)
		for i := range payload {
			payload[i] = landByte(off + i)
		}
		d := wire.Data{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 2}, MessageLength: landLen,
			Incoming: unsched, SegOffset: uint32(off), Payload: payload}
		return d.Append(nil)
	}
	// The sender's cuts: landSeg below the limit, the limit, then landSeg
	// from the limit on.
	var cuts [][2]int
	for off := 0; off < landLen; {
		end := min(off+landSeg, landLen)
		if off < unsched && end > unsched {
			end = unsched
		}
		cuts = append(cuts, [2]int{off, end})
		off = end
	}
	c := New(Local{Port: 500}, Config{})
	var out Output
	var first [][]byte
	i := 0
	for ; cuts[i][1] <= unsched; i++ {
		first = append(first, packet(cuts[i][0], cuts[i][1]))
	}
	c.HandleBatch(landRead(nil, first...), 0, &out)
	var msg *contract.Message
	for i < len(cuts) {
		regions := make([][]byte, 16)
		n := c.Lend(regions)
		if n == 0 {
			t.Fatalf("nothing lent at %d", cuts[i][0])
		}
		var pkts [][]byte
		for k := 0; k < n && i < len(cuts); k++ {
			pkts = append(pkts, packet(cuts[i][0], cuts[i][1]))
			i++
		}
		before := c.Stats().MovedPackets
		out.Reset()
		c.HandleBatch(landRead(regions[:n], pkts...), 0, &out)
		if moved := c.Stats().MovedPackets - before; moved != 0 {
			t.Fatalf("%d of the packets up to %d moved, not landed in place", moved, cuts[i-1][1])
		}
		if len(out.Messages) > 0 {
			msg = out.Messages[0]
		}
	}
	if msg == nil {
		t.Fatal("the message never completed")
	}
	checkMessage(t, msg.Data)
}
