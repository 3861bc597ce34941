package homa_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// TestLazyNeedAckAlone: a response's NEED_ACK deadline is left to the
// next reader of the socket (see Lazy arming), so a server whose
// application replies and then reads no more, to a client whose
// acknowledgment never comes, must still ask for it: the background
// reader takes the socket after its grace and sets the timer. The client
// is a bare UDP socket that sends one request and then only listens.
// NEED_ACK is due two ticks after the reply, and comes within
// milliseconds; the bound is 100 times that, well under the second after
// which the endpoint's next timer (the trim of its buffer pool) would
// have sent it anyway, had nobody set the timer.
func TestLazyNeedAckAlone(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	sc, err := netio.OpenUDP(lo, 0, nil)
	if err != nil {
		t.Skipf("no UDP socket on loopback: %v", err)
	}
	server := homa.NewEndpoint(sc, homa.Config{})
	defer server.Close()
	cc, err := netio.OpenUDP(lo, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	const id = 2
	req := wire.Data{Common: wire.Common{SrcPort: cc.Port(), DstPort: server.Port(), SenderID: id},
		MessageLength: 100, Incoming: 100, SegOffset: wire.OffsetNone, Payload: make([]byte, 100)}
	pkt := req.Append(nil)
	if _, err := cc.WriteBatch([]netio.Packet{{Buf: pkt, N: len(pkt), Addr: lo}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := server.Recv(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Reply(m.Peer.Addr(), m.ID, m.Data); err != nil {
		t.Fatal(err)
	}
	m.Release()
	// The application reads no more. The client reads the response, and
	// then waits for the server to ask for its acknowledgment.
	got := make(chan wire.Type, 16)
	go func() {
		defer close(got)
		pkts := []netio.Packet{{Buf: make([]byte, 2048)}}
		for {
			n, err := cc.ReadBatch(pkts)
			if err != nil {
				return
			}
			for i := range n {
				if typ, err := wire.PeekType(pkts[i].Bytes()); err == nil {
					got <- typ
				}
			}
		}
	}()
	deadline := time.After(300 * time.Millisecond)
	var seen []wire.Type
	for {
		select {
		case typ := <-got:
			seen = append(seen, typ)
			if typ == wire.TypeNeedAck {
				return
			}
		case <-deadline:
			t.Fatalf("no NEED_ACK in 300 ms from a server left alone after its reply; the client got %v", seen)
		}
	}
}
