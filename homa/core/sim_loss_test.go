package core_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
)

// TestSimEcho: messages of every size class cross a clean network.
func TestSimEcho(t *testing.T) {
	n := sim.New(sim.Config{Seed: 1})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	echoSizes(t, n, cli, []int{1, 100, 1480, 1481, 40_000, 65_536, 65_537, 200_000, contract.MaxMessage}, time.Second)
}

// echoSizes sends a request of each size from cli to the echo server at
// serverAP, all at once, runs n for at most limit of simulated time,
// and checks that each came back whole and unharmed.
func echoSizes(t *testing.T, n *sim.Net, cli *sim.Endpoint, sizes []int, limit time.Duration) {
	t.Helper()
	got := collect(cli)
	want := map[uint64][]byte{}
	for i, size := range sizes {
		req := request(uint64(i), size)
		want[send(t, cli, serverAP, req)] = req
	}
	if !n.RunUntil(func() bool { return len(got) == len(want) }, n.Now()+limit) {
		t.Fatalf("%d of %d RPCs ended after %v", len(got), len(want), limit)
	}
	for id, req := range want {
		if m := got[id]; m.Err != nil || !bytes.Equal(m.Data, req) {
			t.Fatalf("RPC %d (%d bytes): err %v, intact %v", id, len(req), m.Err, m.Err == nil && bytes.Equal(m.Data, req))
		}
	}
}

// TestSimLoss: over many seeds, with loss, duplication and reordering of
// every packet type, every RPC completes with its own bytes and every
// request runs exactly once.
func TestSimLoss(t *testing.T) {
	for _, loss := range []float64{0.01, 0.1, 0.3} {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("loss%.0f%%/seed%d", loss*100, seed), func(t *testing.T) {
				lossRun(t, sim.Config{Seed: seed, Loss: loss, Duplicate: 0.05, Jitter: 20 * time.Microsecond}, 300)
			})
		}
	}
}

func lossRun(t *testing.T, cfg sim.Config, rpcs int) {
	n := sim.New(cfg)
	patient := core.Config{Resend: resendPatient}
	srv := n.Listen(serverAP, patient)
	execs := map[uint64]int{}
	echo(srv, n, 0, execs)
	cli := n.Listen(clientAP, patient)
	got := collect(cli)
	sizes := []int{100, 100, 100, 5000, 100_000}
	want := map[uint64][]byte{}
	// Keep 16 RPCs in flight.
	next := 0
	start := func() {
		req := request(uint64(next), sizes[next%len(sizes)])
		want[send(t, cli, serverAP, req)] = req
		next++
	}
	for range 16 {
		start()
	}
	done := 0
	cli.OnMessage = func(_ *sim.Endpoint, m *contract.Message) {
		got[m.ID] = m
		done++
		if next < rpcs {
			start()
		}
	}
	if !n.RunUntil(func() bool { return done == rpcs }, time.Minute) {
		t.Fatalf("%d of %d RPCs done after a simulated minute", done, rpcs)
	}
	for id, req := range want {
		if m := got[id]; m.Err != nil || !bytes.Equal(m.Data, req) {
			t.Fatalf("RPC %d: err %v, payload intact %v", id, m.Err, m.Err == nil && bytes.Equal(m.Data, req))
		}
	}
	for i := range rpcs {
		if c := execs[uint64(i)]; c != 1 {
			t.Errorf("request %d executed %d times", i, c)
		}
	}
	// Stragglers (late duplicates) must still not run anything twice.
	n.Run(n.Now() + 5*time.Second)
	for i := range rpcs {
		if c := execs[uint64(i)]; c != 1 {
			t.Errorf("request %d executed %d times after the stragglers", i, c)
		}
	}
}

// TestOnlyRetransmissionsArrive: a path that drops the first
// transmission of every DATA packet of a message longer than one packet
// (as the shared rig's guest did with segmentation offload off in
// software) delivers only what RESENDs bring. Every RPC must complete,
// each request run once, for as long as the peer answers at all: the
// RESENDs that bring the bytes are answers.
func TestOnlyRetransmissionsArrive(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			var d wire.Data
			drop := func(_, _ netip.AddrPort, pkt []byte) bool {
				if t, err := wire.PeekType(pkt); err != nil || t != wire.TypeData {
					return false
				}
				if _, err := d.Parse(pkt); err != nil {
					return false
				}
				return d.Retransmit == 0 && uint32(len(d.Payload)) < d.MessageLength
			}
			n := sim.New(sim.Config{Seed: seed, Drop: drop, Jitter: 5 * time.Microsecond})
			srv := n.Listen(serverAP, core.Config{}) // the default patience
			execs := map[uint64]int{}
			echo(srv, n, 0, execs)
			cli := n.Listen(clientAP, core.Config{})
			echoSizes(t, n, cli, []int{3000, 100_000, 1_000_000, 500_000}, time.Minute)
			for name, k := range execs {
				if k != 1 {
					t.Errorf("request %d ran %d times", name, k)
				}
			}
			cs, ss := cli.Core.Stats(), srv.Core.Stats()
			t.Logf("done in %v: client resent %d packets, server %d", n.Now(), cs.ResentPackets, ss.ResentPackets)
			if cs.ResentPackets == 0 || ss.ResentPackets == 0 {
				t.Fatal("nothing was resent: the path dropped nothing")
			}
		})
	}
}
