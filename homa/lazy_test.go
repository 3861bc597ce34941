package homa_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/homa/wire"
)

// TestLazyNeedAckAlone: a response's NEED_ACK deadline is left to the
// next reader of the socket (see Lazy arming), so a server whose
// application replies and then reads no more, to a client whose
// acknowledgment never comes, must still ask for it within the NEED_ACK
// deadline: the background reader takes the socket after its grace and
// sets the timer. The client is a bare Conn that sends one request and
// then only listens. On the bubble's clock NEED_ACK is due two ticks
// after the reply; had nobody set the timer, the endpoint's next one
// (the trim of its buffer pool, a second later) would send it.
func TestLazyNeedAckAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server, cc := serverAndConn(t, memnet.New(memnet.Config{Seed: 3}), 40000)

		req := wire.Data{Common: wire.Common{SrcPort: cc.Port(), DstPort: server.Port(), SenderID: 2},
			MessageLength: 100, Incoming: 100, SegOffset: wire.OffsetNone, Payload: make([]byte, 100)}
		pkt := req.Append(nil)
		if _, err := cc.WriteBatch([]netio.Packet{{Buf: pkt, N: len(pkt), Addr: serverAddr}}); err != nil {
			t.Fatal(err)
		}
		m, err := server.Recv(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		replied := time.Now()
		if err := server.Reply(m.Peer.Addr(), m.ID, m.Data); err != nil {
			t.Fatal(err)
		}
		m.Release()
		// The application reads no more; the client waits for the
		// server to ask for its acknowledgment.
		pkts := []netio.Packet{{Buf: make([]byte, 2048)}}
		var seen []wire.Type
		for {
			n, err := cc.ReadBatch(pkts)
			if err != nil {
				t.Fatalf("client read: %v (got %v)", err, seen)
			}
			for i := range n {
				typ, err := wire.PeekType(pkts[i].Bytes())
				if err != nil {
					continue
				}
				seen = append(seen, typ)
				if typ != wire.TypeNeedAck {
					continue
				}
				if d := time.Since(replied); d > 100*time.Millisecond {
					t.Errorf("NEED_ACK %v after the reply (bubble time), want within the deadline's few ticks", d)
				}
				return
			}
		}
	})
}
