package core

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// SRPT inside the endpoint (rxorder.go, txorder.go): crafted packets,
// a virtual now.

var (
	orderServer = netip.MustParseAddrPort("10.0.0.1:500")
	orderA      = netip.MustParseAddr("10.0.0.2")
	orderB      = netip.MustParseAddr("10.0.0.3")
)

// orderData is a DATA packet of the message of length bytes that RPC id
// sends from port srcPort to dstPort: n bytes at off, all unscheduled.
func orderData(id uint64, srcPort, dstPort uint16, length, off, n int) []byte {
	d := wire.Data{Common: wire.Common{SrcPort: srcPort, DstPort: dstPort, SenderID: id},
		MessageLength: uint32(length), Incoming: uint32(length), SegOffset: uint32(off), Payload: make([]byte, n)}
	return d.Append(nil)
}

// orderGrant is a GRANT to the client RPC id (at port 40000) up to off.
func orderGrant(id uint64, off int) []byte {
	g := wire.Grant{Common: wire.Common{SrcPort: 500, DstPort: 40000, SenderID: id ^ 1}, Offset: uint32(off)}
	return g.Append(nil)
}

// TestRxOrder: a batch is handled control first (in arrival order),
// then message by message, fewest remaining bytes first, each message's
// packets in arrival order.
func TestRxOrder(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	long := func(off int) []byte { return orderData(2, 40000, 500, 1_000_000, off, 1000) }
	medium := func(off int) []byte { return orderData(4, 40000, 500, 30_000, off, 1000) }
	grant := orderGrant(6, 5000)
	ack := (&wire.Ack{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 8}}).Append(nil)
	pkts := []Inbound{
		0: {Buf: long(500_000), Addr: orderA},
		1: {Buf: grant, Addr: orderA},
		2: {Buf: medium(0), Addr: orderB},
		3: {Buf: long(501_000), Addr: orderA},
		4: {Buf: orderData(2, 40000, 500, 100, 0, 100), Addr: orderB}, // same id and port, another host
		5: {Buf: ack, Addr: orderB},
		6: {Buf: medium(1000), Addr: orderB},
		7: {Buf: []byte{1, 2, 3}, Addr: orderB}, // malformed
		8: {Buf: long(502_000), Addr: orderA},
	}
	order := c.rxOrder(pkts)
	var got []int
	for _, rk := range order {
		got = append(got, int(rk.idx))
	}
	if want := []int{1, 5, 7, 4, 2, 6, 0, 3, 8}; !slices.Equal(got, want) {
		t.Errorf("handled in order %v, want %v", got, want)
	}
	// One message's packets in order: nothing to sort.
	if order := c.rxOrder([]Inbound{{Buf: grant, Addr: orderA}, {Buf: long(0), Addr: orderA}, {Buf: long(1000), Addr: orderA}}); order != nil {
		t.Errorf("a batch in order was sorted: %v", order)
	}
}

// TestBatchDeliversShortFirst: a batch brings the last 10 packets of a
// 1 MB request and, after them, a one-packet request from another host.
// The short request is handled, and delivered, first.
func TestBatchDeliversShortFirst(t *testing.T) {
	const length, seg = 1_000_000, 10_000
	c := New(Local{Port: 500}, Config{})
	var out Output
	now := time.Duration(0)
	var batch []Inbound
	for off := 0; off < length-10*seg; off += seg {
		batch = append(batch, Inbound{Buf: orderData(2, 40000, 500, length, off, seg), Addr: orderA})
		if len(batch) == 16 {
			now += time.Microsecond
			c.HandleBatch(batch, now, &out)
			batch = batch[:0]
		}
	}
	c.HandleBatch(batch, now, &out)
	if len(out.Messages) != 0 {
		t.Fatalf("%d messages before the last batch", len(out.Messages))
	}
	batch = batch[:0]
	for off := length - 10*seg; off < length; off += seg {
		batch = append(batch, Inbound{Buf: orderData(2, 40000, 500, length, off, seg), Addr: orderA})
	}
	batch = append(batch, Inbound{Buf: orderData(4, 40001, 500, 100, 0, 100), Addr: orderB})
	out.Reset()
	c.HandleBatch(batch, now+time.Microsecond, &out)
	var got []int
	for _, m := range out.Messages {
		got = append(got, len(m.Data))
	}
	if want := []int{100, length}; !slices.Equal(got, want) {
		t.Fatalf("delivered messages of %v bytes, want %v", got, want)
	}
	if m := out.Messages[0]; m.Peer != netip.AddrPortFrom(orderB, 40001) || m.ID != 5 {
		t.Errorf("first message from %v id %d, want the short request", m.Peer, m.ID)
	}
}

// orderClient is a client core with a 1 MB request and a 60 KB one sent
// to orderServer in packets of 1500 bytes, their unscheduled bytes out.
func orderClient(t *testing.T, cfg Config) (c *Core, long, short uint64) {
	t.Helper()
	c = New(Local{Port: 40000, FirstID: 100}, cfg)
	var out Output
	var err error
	if long, err = c.Send(orderServer, make([]byte, 1_000_000), 0, 1500, 0, &out); err != nil {
		t.Fatal(err)
	}
	if short, err = c.Send(orderServer, make([]byte, 60_000), 0, 1500, 0, &out); err != nil {
		t.Fatal(err)
	}
	return c, long, short
}

// dataOf lists the RPC (our id) of each packet of out: 0 for packets
// other than DATA.
func dataOf(t *testing.T, out *Output) []uint64 {
	t.Helper()
	ids := make([]uint64, len(out.Packets))
	for i, p := range out.Packets {
		if typ, _ := wire.PeekType(p.Buf); typ == wire.TypeData {
			var d wire.Data
			if _, err := d.Parse(p.Buf); err != nil {
				t.Fatal(err)
			}
			ids[i] = d.SenderID
		}
	}
	return ids
}

// runs compresses ids into its runs: [a a b b b a] -> [a b a].
func runs(ids []uint64) []uint64 { return slices.Compact(slices.Clone(ids)) }

// TestTransmitShortFirst: one batch grants a 1 MB request 200 KB more,
// then the rest of a 60 KB request. The short request's packets go
// first, then the long one's, each in order.
func TestTransmitShortFirst(t *testing.T) {
	c, long, short := orderClient(t, Config{})
	var out Output
	c.HandleBatch([]Inbound{
		{Buf: orderGrant(long, 240_000), Addr: orderServer.Addr()},
		{Buf: orderGrant(short, 60_000), Addr: orderServer.Addr()},
	}, time.Millisecond/2, &out)
	ids := dataOf(t, &out)
	if want := []uint64{short, long}; !slices.Equal(runs(ids), want) {
		t.Fatalf("DATA of RPCs %v in turn, want %v", runs(ids), want)
	}
	var prev uint32
	for i, p := range out.Packets {
		var d wire.Data
		if _, err := d.Parse(p.Buf); err != nil {
			t.Fatal(err)
		}
		if i > 0 && ids[i] == ids[i-1] && d.Offset() <= prev {
			t.Fatalf("packet %d of RPC %d at %d after %d: out of order", i, ids[i], d.Offset(), prev)
		}
		prev = d.Offset()
	}
}

// TestTransmitControlFirst: a batch that lets a 1 MB request send more
// and brings the first packet of a 1 MB response, which the client
// grants: the GRANT goes out before the request's DATA.
func TestTransmitControlFirst(t *testing.T) {
	c, long, short := orderClient(t, Config{})
	d := wire.Data{Common: wire.Common{SrcPort: 500, DstPort: 40000, SenderID: short ^ 1},
		MessageLength: 1_000_000, Incoming: 40_000, Payload: make([]byte, 1444)}
	resp := d.Append(nil)
	var out Output
	c.HandleBatch([]Inbound{
		{Buf: orderGrant(long, 240_000), Addr: orderServer.Addr()},
		{Buf: resp, Addr: orderServer.Addr()},
	}, time.Millisecond/2, &out)
	ids := dataOf(t, &out)
	if want := []uint64{0, long}; !slices.Equal(runs(ids), want) {
		t.Fatalf("packets of RPCs %v (0: control), want %v", runs(ids), want)
	}
	grants := 0
	for _, p := range out.Packets {
		if typ, _ := wire.PeekType(p.Buf); typ == wire.TypeGrant {
			grants++
		}
	}
	if grants != 1 {
		t.Errorf("%d GRANTs among the control packets, want 1", grants)
	}
}

// TestPacedShortNext: with the pacer on, a 100-byte request sent while a
// 1 MB one is paced out is the next packet to leave (the pacer's SRPT
// queue, which the ordering of a call's packets keeps).
func TestPacedShortNext(t *testing.T) {
	c := New(Local{Port: 40000, FirstID: 100}, Config{LinkMbps: 1000})
	var out Output
	if _, err := c.Send(orderServer, make([]byte, 1_000_000), 0, 1500, 0, &out); err != nil {
		t.Fatal(err)
	}
	at, ok := c.Next()
	if !ok || len(out.Packets) == 0 {
		t.Fatalf("pacer: %d packets sent, next at %v (%v)", len(out.Packets), at, ok)
	}
	out.Reset()
	short, err := c.Send(orderServer, make([]byte, 100), 0, 1500, time.Microsecond, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Packets) == 0 { // the budget is full: wait for it
		at, _ = c.Next()
		c.Tick(at, &out)
	}
	if ids := dataOf(t, &out); len(ids) == 0 || ids[0] != short {
		t.Errorf("DATA of RPCs %v, want %d first", runs(ids), short)
	}
}

// TestPacedRetransmissionWaits: with the pacer on, a RESEND for 200 KB
// of a 1 MB request being paced out does not put those bytes ahead of a
// 100-byte request sent just after it: the retransmission waits in the
// pacer's queue, and the short request is the next DATA to go, after at
// most the packets already admitted. The retransmission follows.
func TestPacedRetransmissionWaits(t *testing.T) {
	c := New(Local{Port: 40000, FirstID: 100}, Config{LinkMbps: 1000})
	var out Output
	now := time.Duration(0)
	long, err := c.Send(orderServer, make([]byte, 1_000_000), 0, 1500, now, &out)
	if err != nil {
		t.Fatal(err)
	}
	c.HandleBatch([]Inbound{{Buf: orderGrant(long, 1_000_000), Addr: orderServer.Addr()}}, now, &out)
	for c.clients[long].out.next < 300_000 {
		at, ok := c.Next()
		if !ok {
			t.Fatal("the pacer stopped")
		}
		now = at
		c.Tick(now, &out)
	}
	out.Reset()
	rs := wire.Resend{Common: wire.Common{SrcPort: 500, DstPort: 40000, SenderID: long ^ 1}, Length: 200_000}
	c.HandleBatch([]Inbound{{Buf: rs.Append(nil), Addr: orderServer.Addr()}}, now, &out)
	short, err := c.Send(orderServer, make([]byte, 100), 0, 1500, now, &out)
	if err != nil {
		t.Fatal(err)
	}
	before, shortSent, resent := 0, false, 0
	for range 1000 {
		for i, id := range dataOf(t, &out) {
			shortSent = shortSent || id == short
			if !shortSent {
				before++
			}
			var d wire.Data
			if _, err := d.Parse(out.Packets[i].Buf); err == nil && d.Retransmit != 0 {
				resent += len(d.Payload) + len(out.Packets[i].Payload)
			}
		}
		out.Reset()
		if before > 4 {
			t.Fatalf("%d packets went out before the 100-byte request", before)
		}
		if shortSent && resent >= 200_000 {
			break
		}
		at, _ := c.Next()
		now = max(now, at)
		c.Tick(now, &out)
	}
	if !shortSent || resent < 200_000 {
		t.Errorf("short request sent: %v; %d bytes retransmitted, want 200,000", shortSent, resent)
	}
}

// TestRequestBeforeItsResends: a server that did not run for a while
// reads a client's request and the RESENDs the client sent for its
// response since, in one batch. The request is handled first, as it
// came: the RESENDs find the RPC and are answered BUSY, not taken for
// RESENDs about a request the server lacks, which it would ask the
// client for, once each.
func TestRequestBeforeItsResends(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	resend := (&wire.Resend{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 2}, Length: wire.ResendToEnd}).Append(nil)
	pkts := []Inbound{
		{Buf: orderData(2, 40000, 500, 100, 0, 100), Addr: orderA},
		{Buf: resend, Addr: orderA},
		{Buf: slices.Clone(resend), Addr: orderA},
	}
	var out Output
	c.HandleBatch(pkts, 20*time.Millisecond, &out)
	if len(out.Messages) != 1 || !out.Messages[0].IsRequest() {
		t.Fatalf("messages %+v, want the request", out.Messages)
	}
	got := map[wire.Type]int{}
	for _, p := range out.Packets {
		typ, _ := wire.PeekType(p.Buf)
		got[typ]++
	}
	if got[wire.TypeResend] != 0 || got[wire.TypeBusy] != 2 {
		t.Errorf("sent %v, want 2 BUSY and no RESEND", got)
	}
	if st := c.Stats(); st.TotalDrops() != 0 {
		t.Errorf("drops %v", st.Drops)
	}
}
