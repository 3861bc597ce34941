package homa_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
)

// TestShortOvertakesLong: a receiver behind a 1 Gbit/s downlink with
// priority queues is taking a 1,000,000-byte message when a 100-byte
// message for it starts. The short one must finish first, within a few
// packet times of when it was sent: its packets go at a higher priority
// than the long message's (receiver's cutoffs for unscheduled bytes,
// lowest levels for granted ones), and the switch serves them first.
// Time is the fake clock of a synctest bubble, so the bound is exact.
func TestShortOvertakesLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := netio.NewMemNetwork(netio.MemConfig{Seed: 40, MTU: 1500, LinkMbps: 1000})
		// Polling spins, and a spinning goroutine would stop the fake
		// clock: this test parks instead.
		cfg := homa.Config{PollDuration: -1}
		sc, _ := nw.Open(serverAddr, 500)
		lc, _ := nw.Open(clientAddr, 0)
		server, long := homa.NewEndpoint(sc, cfg), homa.NewEndpoint(lc, cfg)
		sh, _ := nw.Open(clientAddr, 0)
		short := homa.NewEndpoint(sh, cfg)
		defer server.Close()
		defer long.Close()
		defer short.Close()

		done := map[int]time.Time{}
		served := make(chan struct{})
		go func() {
			defer close(served)
			for range 2 {
				m, err := server.Recv(context.Background(), 0)
				if err != nil {
					return
				}
				done[len(m.Data)] = time.Now()
			}
		}()
		start := time.Now()
		if _, err := long.Send(server.LocalAddr(), make([]byte, 1_000_000), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // the long message is well under way
		sent := time.Now()
		if _, err := short.Send(server.LocalAddr(), make([]byte, 100), 0); err != nil {
			t.Fatal(err)
		}
		<-served

		// One full packet takes 12 µs at 1 Gbit/s; the short one may wait
		// for the packet on the wire and for its own.
		const packet = 1500 * 8 * time.Microsecond / 1000
		if d := done[100].Sub(sent); d > 3*packet {
			t.Errorf("100-byte message took %v behind the long one, want at most %v", d, 3*packet)
		}
		if !done[100].Before(done[1_000_000]) {
			t.Errorf("the long message finished first (%v vs %v)", done[1_000_000].Sub(start), done[100].Sub(start))
		}
		// The long message could not finish before its bytes fit through
		// the link: ~8.2 ms at 1 Gbit/s with headers.
		if d := done[1_000_000].Sub(start); d < 8*time.Millisecond {
			t.Errorf("1 MB in %v over 1 Gbit/s: the link model is not limiting", d)
		}
		t.Logf("100 B: %v after sending; 1 MB: %v; network %+v", done[100].Sub(sent), done[1_000_000].Sub(start), nw.Stats().DeliveredPackets)
	})
}

// shortBehindLong sends a 1 MB message and, 2 ms later, a 100-byte one
// from the same client endpoint over a network whose sender has a FIFO
// uplink (a NIC: no priorities) at 1 Gbit/s, and returns how long the
// short message took and when the long one finished. It runs on the fake
// clock of a synctest bubble.
func shortBehindLong(t *testing.T, linkMbps int) (short, long time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		nw := netio.NewMemNetwork(netio.MemConfig{Seed: 41, MTU: 1500, UplinkMbps: 1000, LinkMbps: 1000})
		cfg := homa.Config{PollDuration: -1, LinkMbps: linkMbps}
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		server, client := homa.NewEndpoint(sc, cfg), homa.NewEndpoint(cc, cfg)
		defer server.Close()
		defer client.Close()
		done := map[int]time.Time{}
		served := make(chan struct{})
		go func() {
			defer close(served)
			for range 2 {
				m, err := server.Recv(context.Background(), 0)
				if err != nil {
					return
				}
				done[len(m.Data)] = time.Now()
			}
		}()
		start := time.Now()
		if _, err := client.Send(server.LocalAddr(), make([]byte, 1_000_000), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		sent := time.Now()
		if _, err := client.Send(server.LocalAddr(), make([]byte, 100), 0); err != nil {
			t.Fatal(err)
		}
		<-served
		short, long = done[100].Sub(sent), done[1_000_000].Sub(start)
		st := client.Stats()
		if linkMbps > 0 && (st.Pacer.Sends == 0 || st.Pacer.Throttled == 0) {
			t.Errorf("pacer idle on a saturated link: %+v", st.Pacer)
		}
		if g := server.Stats().Grants; g.GrantedBytes < 1_000_000-40_000 {
			t.Errorf("scheduler granted %d bytes of a 1 MB message: %+v", g.GrantedBytes, g)
		}
	})
	return short, long
}

// TestPacer: with the pacer on, the sender's own queue is SRPT-ordered
// and the NIC below holds only a few microseconds of data, so a 100-byte
// message sent during a 1 MB one from the same endpoint leaves within a
// few packet times; without it, the short message waits in the NIC's FIFO
// behind the long one's granted bytes.
func TestPacer(t *testing.T) {
	const packet = 1500 * 8 * time.Microsecond / 1000 // 12 µs at 1 Gbit/s
	paced, pacedLong := shortBehindLong(t, 980)
	unpaced, unpacedLong := shortBehindLong(t, 0)
	t.Logf("100 B behind 1 MB: paced %v (1 MB in %v), unpaced %v (1 MB in %v)", paced, pacedLong, unpaced, unpacedLong)
	if paced > 4*packet {
		t.Errorf("paced: the 100-byte message took %v, want at most %v", paced, 4*packet)
	}
	if unpaced < 10*packet {
		t.Errorf("unpaced: the 100-byte message took only %v: the test does not reproduce head-of-line blocking", unpaced)
	}
	// Pacing slightly below the link rate costs the long message little.
	if pacedLong > unpacedLong*11/10 {
		t.Errorf("pacing slowed the 1 MB message from %v to %v", unpacedLong, pacedLong)
	}
}
