package homa_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/memnet"
)

// packet1G is the time one full 1500-byte packet takes at 1 Gbit/s.
const packet1G = 1500 * 8 * time.Microsecond / 1000

// head is how long the long message is under way before the short one
// is sent.
const head = 2 * time.Millisecond

// shortBehindLong sends a 1 MB message from a client host to a server,
// and head later a 100-byte message from the same host: from the same
// endpoint, or from a second endpoint when separate is set. It returns
// how long the short message took from its Send, and the long one from
// its own. Polling is off: a spinning poller would stop the fake clock
// of the synctest bubble it runs in.
func shortBehindLong(t *testing.T, mc memnet.Config, linkMbps int, separate bool) (short, long time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(mc)
		cfg := homa.Config{Config: core.Config{LinkMbps: linkMbps}, PollDuration: -1}
		sc, _ := nw.Open(serverAddr, 500)
		cc, _ := nw.Open(clientAddr, 0)
		server, client := homa.NewEndpoint(sc, cfg), homa.NewEndpoint(cc, cfg)
		defer server.Close()
		defer client.Close()
		shortFrom := client
		if separate {
			c2, _ := nw.Open(clientAddr, 0)
			shortFrom = homa.NewEndpoint(c2, cfg)
			defer shortFrom.Close()
		}
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
		time.Sleep(head)
		sent := time.Now()
		if _, err := shortFrom.Send(server.LocalAddr(), make([]byte, 100), 0); err != nil {
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
		t.Logf("100 B: %v after sending; 1 MB: %v; delivered by priority %v", short, long, nw.Stats().DeliveredPackets)
	})
	return short, long
}

// TestShortOvertakesLong: a receiver behind a 1 Gbit/s downlink with
// priority queues is taking a 1,000,000-byte message when a 100-byte
// message for it starts. The short one must finish first, within a few
// packet times of when it was sent: its packets go at a higher priority
// than the long message's (receiver's cutoffs for unscheduled bytes,
// lowest levels for granted ones), and the switch serves them first.
func TestShortOvertakesLong(t *testing.T) {
	short, long := shortBehindLong(t, memnet.Config{Seed: 40, MTU: 1500, LinkMbps: 1000}, 0, true)
	// The short one may wait for the packet on the wire and for its own.
	if short > 3*packet1G {
		t.Errorf("100-byte message took %v behind the long one, want at most %v", short, 3*packet1G)
	}
	if head+short >= long {
		t.Errorf("the long message finished first (%v vs %v)", long, head+short)
	}
	// The long message cannot finish before its bytes fit through the
	// link: ~8.2 ms at 1 Gbit/s with headers.
	if long < 8*time.Millisecond {
		t.Errorf("1 MB in %v over 1 Gbit/s: the link model is not limiting", long)
	}
}

// TestPacer: with the pacer on, the sender's own queue is SRPT-ordered
// and the NIC below holds only a few microseconds of data, so a 100-byte
// message sent during a 1 MB one from the same endpoint leaves within a
// few packet times; without it, the short message waits in the NIC's FIFO
// (a 1 Gbit/s uplink without priorities) behind the long one's granted
// bytes.
func TestPacer(t *testing.T) {
	mc := memnet.Config{Seed: 41, MTU: 1500, UplinkMbps: 1000, LinkMbps: 1000}
	paced, pacedLong := shortBehindLong(t, mc, 980, false)
	unpaced, unpacedLong := shortBehindLong(t, mc, 0, false)
	if paced > 4*packet1G {
		t.Errorf("paced: the 100-byte message took %v, want at most %v", paced, 4*packet1G)
	}
	if unpaced < 10*packet1G {
		t.Errorf("unpaced: the 100-byte message took only %v: the test does not reproduce head-of-line blocking", unpaced)
	}
	// Pacing slightly below the link rate costs the long message little.
	if pacedLong > unpacedLong*11/10 {
		t.Errorf("pacing slowed the 1 MB message from %v to %v", unpacedLong, pacedLong)
	}
}
