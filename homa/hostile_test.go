package homa_test

import (
	"encoding/binary"
	"errors"
	stdnetip "net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/wire"
)

func dataPkt(id uint64, msgLen, off uint32, payload []byte) []byte {
	d := wire.Data{
		Common:        wire.Common{SrcPort: 40000, DstPort: 500, Sequence: off, SenderID: id},
		MessageLength: msgLen,
		Incoming:      min(msgLen, 40_000),
		SegOffset:     off,
		Payload:       payload,
	}
	return d.Append(nil)
}

func newServer(t *testing.T) *homa.Endpoint {
	nw := memnet.New(memnet.Config{Seed: 9})
	c, err := nw.Open(serverAddr, 500)
	if err != nil {
		t.Fatal(err)
	}
	e := homa.NewEndpoint(c, homa.Config{})
	t.Cleanup(func() { e.Close() })
	return e
}

// TestMalformedInput feeds broken packets to an endpoint: each is dropped
// and counted under the right reason, and none creates state.
func TestMalformedInput(t *testing.T) {
	valid := dataPkt(1000, 100, 0, make([]byte, 100))
	unknown := append([]byte(nil), valid...)
	unknown[11] = 0x42
	cases := []struct {
		name string
		pkt  []byte
		why  contract.DropReason
	}{
		{"empty", nil, contract.DropShort},
		{"10 bytes", valid[:10], contract.DropShort},
		{"truncated DATA header", valid[:40], contract.DropShort},
		{"unknown type", unknown, contract.DropUnknownType},
		{"message_length over 1,000,000", dataPkt(1002, 1_000_001, 0, []byte("x")), contract.DropBadField},
		{"message_length zero", dataPkt(1004, 0, 0, nil), contract.DropBadField},
		{"offset past message_length", dataPkt(1006, 100, 100, []byte("x")), contract.DropBadField},
		{"payload past message_length", dataPkt(1008, 100, 50, make([]byte, 51)), contract.DropBadField},
		{"offset near 2^32", dataPkt(1010, 100, 0xfffffff0, make([]byte, 32)), contract.DropBadField},
		{"truncated GRANT", (&wire.Grant{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 3}}).Append(nil)[:30], contract.DropShort},
		{"GRANT for unknown RPC", (&wire.Grant{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 1013}, Offset: 5}).Append(nil), contract.DropUnknownRPC},
		{"response for unknown client RPC", dataPkt(1015, 10, 0, make([]byte, 10)), contract.DropUnknownRPC},
		{"another port", (&wire.Grant{Common: wire.Common{SrcPort: 40000, DstPort: 501, SenderID: 1017}}).Append(nil), contract.DropOtherPort},
	}
	e := newServer(t)
	for _, tc := range cases {
		before := e.Stats().Drops[tc.why]
		e.HandlePacket(tc.pkt, clientAddr)
		st := e.Stats()
		if st.Drops[tc.why] != before+1 {
			t.Errorf("%s: drops[%v] = %d, want %d (all drops %v)", tc.name, tc.why, st.Drops[tc.why], before+1, st.Drops)
		}
		if st.ServerRPCs != 0 {
			t.Fatalf("%s: created server state", tc.name)
		}
	}
	// The valid packet still works after all that.
	e.HandlePacket(valid, clientAddr)
	m, err := e.Recv(withTimeout(t, 5*time.Second), 0)
	if err != nil || len(m.Data) != 100 {
		t.Fatalf("valid request after malformed ones: %v", err)
	}
}

// TestForgedResponse: a packet claiming to be the response of a client
// RPC but sent from another host, or from another port of the right host,
// changes nothing.
func TestForgedResponse(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 10})
	cc, _ := nw.Open(clientAddr, 0)
	client := homa.NewEndpoint(cc, homa.Config{})
	defer client.Close()
	id, err := client.Send(stdnetip.MustParseAddrPort("10.0.0.1:500"), []byte("hello"), 0)
	if err != nil {
		t.Fatal(err)
	}
	forge := func(src string, port uint16) {
		d := wire.Data{Common: wire.Common{SrcPort: port, DstPort: client.Port(), SenderID: id | 1},
			MessageLength: 5, Incoming: 5, SegOffset: 0, Payload: []byte("evil!")}
		client.HandlePacket(d.Append(nil), stdnetip.MustParseAddr(src))
	}
	forge("10.0.0.66", 500) // wrong host
	forge("10.0.0.1", 501)  // right host, wrong port
	if st := client.Stats(); st.Drops[contract.DropUnknownRPC] != 2 || st.ClientRPCs != 1 {
		t.Fatalf("forgeries not dropped as unknown: %+v", st)
	}
	// With no real server the RPC can only end by timing out.
	m, err := client.Recv(withTimeout(t, 10*time.Second), id)
	if err != nil || !errors.Is(m.Err, contract.ErrPeerTimeout) {
		t.Fatalf("RPC with only forged answers ended with %v / %+v, want ErrPeerTimeout", err, m)
	}
}

// TestServerRPCLimit: floods of new request ids stop at the per-peer
// limit, and all peers together at the per-endpoint limit; refused
// requests are counted, and state stays bounded. (On a frozen clock, in
// a synctest bubble: no request ever gets old enough to be shed for a
// newcomer.)
func TestServerRPCLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 11})
		c, _ := nw.Open(serverAddr, 500)
		e := homa.NewEndpoint(c, homa.Config{Config: core.Config{Limits: contract.Limits{IncomingRPCs: 50, IncomingRPCsPerPeer: 30}}, PollDuration: -1})
		defer e.Close()
		flood := func(from stdnetip.Addr) {
			for i := range 200 {
				// Half of each request: the RPCs stay incomplete.
				e.HandlePacket(dataPkt(uint64(2+2*i), 1000, 0, make([]byte, 500)), from)
			}
		}
		flood(clientAddr)
		if st := e.Stats(); st.ServerRPCs != 30 || st.Drops[contract.DropLimit] != 170 {
			t.Fatalf("one peer: %d server RPCs, %d refused; want 30 and 170", st.ServerRPCs, st.Drops[contract.DropLimit])
		}
		flood(stdnetip.MustParseAddr("10.0.0.3"))
		if st := e.Stats(); st.ServerRPCs != 50 || st.Drops[contract.DropLimit] != 170+180 {
			t.Fatalf("two peers: %d server RPCs, %d refused; want 50 and 350", st.ServerRPCs, st.Drops[contract.DropLimit])
		}
	})
}

// TestForgedSourcesBounded: requests from ever new (forged) source
// addresses stop creating peers at MaxPeers.
func TestForgedSourcesBounded(t *testing.T) {
	nw := memnet.New(memnet.Config{Seed: 14})
	c, _ := nw.Open(serverAddr, 500)
	e := homa.NewEndpoint(c, homa.Config{Config: core.Config{Limits: contract.Limits{Peers: 100}}})
	defer e.Close()
	for i := range 1000 {
		src := stdnetip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})
		e.HandlePacket(dataPkt(2, 1000, 0, make([]byte, 500)), src)
	}
	if st := e.Stats(); st.Peers != 100 || st.ServerRPCs != 100 || st.Drops[contract.DropLimit] != 900 {
		t.Fatalf("%d peers, %d RPCs, %d refused; want 100, 100, 900", st.Peers, st.ServerRPCs, st.Drops[contract.DropLimit])
	}
}

// FuzzHandlePacket feeds an endpoint arbitrary packet sequences (each
// packet prefixed by a 2-byte length): nothing panics and state stays
// within its limits.
func FuzzHandlePacket(f *testing.F) {
	seq := func(pkts ...[]byte) []byte {
		var b []byte
		for _, p := range pkts {
			b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
			b = append(b, p...)
		}
		return b
	}
	f.Add(seq(dataPkt(1000, 100, 0, make([]byte, 100))))
	f.Add(seq(dataPkt(1000, 3000, 0, make([]byte, 1000)), dataPkt(1000, 3000, 2000, make([]byte, 1000)), dataPkt(1000, 3000, 1000, make([]byte, 1000))))
	f.Add(seq((&wire.Resend{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 1000}, Length: wire.ResendToEnd}).Append(nil)))
	f.Add(seq((&wire.Ack{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 1000}, NumAcks: 9}).Append(nil)))
	f.Add(seq((&wire.Cutoffs{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: 1001}}).Append(nil)))
	nw := memnet.New(memnet.Config{Seed: 12})
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := nw.Open(serverAddr, 0)
		if err != nil {
			t.Fatal(err)
		}
		e := homa.NewEndpoint(c, homa.Config{Config: core.Config{Limits: contract.Limits{IncomingRPCs: 64, PendingReplies: 64}}})
		defer e.Close()
		for len(in) >= 2 {
			n := int(binary.BigEndian.Uint16(in))
			in = in[2:]
			n = min(n, len(in))
			pkt := in[:n]
			in = in[n:]
			if len(pkt) >= 4 {
				binary.BigEndian.PutUint16(pkt[2:], e.Port())
			}
			e.HandlePacket(pkt, clientAddr)
		}
		if st := e.Stats(); st.IncomingRPCs > 64 || st.PendingReplies > 64 || st.ServerRPCs > 128 {
			t.Fatalf("server RPCs past the limits of 64 receiving and 64 awaiting replies: %d, %d, %d in all", st.IncomingRPCs, st.PendingReplies, st.ServerRPCs)
		}
	})
}

// TestGrantAndResendBounds: a GRANT far beyond the message length makes
// the sender send its message and nothing past it; a RESEND for a range
// outside the message is ignored and counted.
func TestGrantAndResendBounds(t *testing.T) {
	const length = 100_000
	var mu sync.Mutex
	var worst uint64 // highest offset+length of any DATA sent
	nw := memnet.New(memnet.Config{Seed: 13, MTU: 1500, Drop: func(_, _ stdnetip.Addr, pkt []byte) bool {
		var d wire.Data
		if _, err := d.Parse(pkt); err == nil {
			mu.Lock()
			worst = max(worst, uint64(d.Offset())+uint64(len(d.Payload)))
			mu.Unlock()
		}
		return true // the server never hears anything
	}})
	cc, _ := nw.Open(clientAddr, 0)
	client := homa.NewEndpoint(cc, homa.Config{})
	defer client.Close()
	dst := stdnetip.MustParseAddrPort("10.0.0.1:500")
	id, err := client.Send(dst, make([]byte, length), 0)
	if err != nil {
		t.Fatal(err)
	}
	from := func(p interface{ Append([]byte) []byte }) { client.HandlePacket(p.Append(nil), dst.Addr()) }
	hdr := wire.Common{SrcPort: 500, DstPort: client.Port(), SenderID: id | 1}
	from(&wire.Grant{Common: hdr, Offset: 0xffff_fff0, Priority: 200})
	mu.Lock()
	got := worst
	mu.Unlock()
	if got != length {
		t.Fatalf("after a huge GRANT the client sent up to byte %d, want exactly %d", got, length)
	}
	drops := client.Stats().Drops[contract.DropBadField]
	from(&wire.Resend{Common: hdr, Offset: length, Length: 5000})
	from(&wire.Resend{Common: hdr, Offset: 0xffff_0000, Length: wire.ResendToEnd})
	if d := client.Stats().Drops[contract.DropBadField]; d != drops+2 {
		t.Fatalf("RESENDs outside the message: bad-field drops %d -> %d, want +2", drops, d)
	}
	if r := client.Stats().Retransmits; r != 0 {
		t.Fatalf("RESENDs outside the message caused %d retransmissions", r)
	}
}
