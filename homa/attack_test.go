package homa_test

import (
	"fmt"
	stdnetip "net/netip"
	"runtime"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
)

// TestForgedClaimsHeap: forged first packets that each claim a
// 1,000,000-byte message grow the server's Go heap by what was sent,
// within the attacker's share of receive memory, not by what was claimed
// (2,000 such packets once grew it by 2 GB).
func TestForgedClaimsHeap(t *testing.T) {
	for _, n := range []int{2000, 10000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := memnet.New(memnet.Config{Seed: 15})
				c, _ := nw.Open(serverAddr, 500)
				e := homa.NewEndpoint(c, homa.Config{PollDuration: -1})
				defer e.Close()
				pkt := func(i int) []byte { return dataPkt(uint64(2+2*i), contract.MaxMessage, 0, make([]byte, 1400)) }
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				src := stdnetip.MustParseAddr("10.0.0.66")
				for i := range n {
					e.HandlePacket(pkt(i), src)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				grew := int64(after.HeapInuse) - int64(before.HeapInuse)
				st := e.Stats()
				share := 16 << 20 // the default RecvMemoryPerPeer
				t.Logf("%d forged 1 MB claims: heap in use grew %.1f MiB; receive memory %.1f MiB in %d RPCs; drops %v",
					n, float64(grew)/(1<<20), float64(st.RecvMemory)/(1<<20), st.IncomingRPCs, st.Drops)
				if st.RecvMemory > share {
					t.Errorf("receive memory %d over the host's share %d", st.RecvMemory, share)
				}
				if grew > int64(share+8<<20) {
					t.Errorf("heap in use grew %d bytes: more than the host's share and some", grew)
				}
			})
		})
	}
}

// TestShortPacketsCounted: a packet shorter than a common header is
// counted among the endpoint's drops, whether the socket layer drops it
// (raw IP and UDP: "socket") or the core does ("short").
func TestShortPacketsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, cc := serverAndConn(t, memnet.New(memnet.Config{Seed: 16}), 0)
		short := []byte{0x9c, 0x40, 0x01, 0xf4, 0, 0, 0, 0, 0, 0} // ports 40000 -> 500, then nothing
		if _, err := cc.WriteBatch([]netio.Packet{{Buf: short, N: len(short), Addr: serverAddr}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := e.Stats(); st.Drops[contract.DropSocket]+st.Drops[contract.DropShort] != 1 {
			t.Fatalf("short packet: drops %v, want one socket or short drop", st.Drops)
		}
	})
}
