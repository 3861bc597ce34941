package homa_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
)

// TestUDPOffloads: over UDP with GSO and GRO on, at a 1500-byte MTU (so
// that the kernel coalesces the sender's runs), the endpoint reads
// borrowed packets and messages of every size arrive intact.
func TestUDPOffloads(t *testing.T) {
	addr := netip.MustParseAddr("127.0.0.1")
	opt := &netio.Options{MTU: 1500}
	sc, err := netio.OpenUDP(addr, 0, opt)
	if err != nil {
		t.Fatal(err)
	}
	if st := sc.(netio.StatsConn).Stats(); !st.GRO || !st.GSO {
		sc.Close()
		t.Skipf("the kernel lacks UDP offloads (GSO %v, GRO %v)", st.GSO, st.GRO)
	}
	cc, err := netio.OpenUDP(addr, 0, opt)
	if err != nil {
		t.Fatal(err)
	}
	p := startPair(t, homa.NewEndpoint(sc, homa.Config{}), homa.NewEndpoint(cc, homa.Config{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, n := range []int{1, 1400, 5000, 40_000, 200_000, 1_000_000} {
		req := payload(uint64(i), n)
		id, err := p.client.Send(p.dst, req, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := p.client.Recv(ctx, id)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if m.Err != nil || !bytes.Equal(m.Data, req) {
			t.Fatalf("%d bytes: err %v, echo equal %v", n, m.Err, bytes.Equal(m.Data, req))
		}
		m.Release()
	}
	st := sc.(netio.StatsConn).Stats()
	if st.RecvDatagrams == 0 || st.Read <= st.RecvDatagrams {
		t.Errorf("server read %d packets in %d datagrams: GRO coalesced nothing", st.Read, st.RecvDatagrams)
	}
}
