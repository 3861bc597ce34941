package core_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
)

// unwatched reports (as an error of t) a parked message that nothing will
// unpark in any of the endpoints' cores (see Core.Unwatched).
func unwatched(t *testing.T, n *sim.Net, es ...*sim.Endpoint) bool {
	t.Helper()
	for _, e := range es {
		if ids := e.Core.Unwatched(); len(ids) > 0 {
			t.Errorf("at %v %v holds parked RPCs %v with no timer set", n.Now(), e.Addr(), ids)
			return true
		}
	}
	return false
}

// TestParkedMessagesResume: requests of 100 KB to 1 MB arrive faster
// than a lossy network carries them, so that the server runs short of
// receive memory and parks messages (takes them out of the grant
// scheduler). A parked message always has a timer that gives it its
// place back once memory allows, and every RPC ends, completed or
// failed. Before, a message that had waited in the scheduler past its
// grant timeout had no timer left; parked then, it waited for ever, and
// its client, answered BUSY by the server, too.
func TestParkedMessagesResume(t *testing.T) {
	const rpcs = 120
	n := sim.New(sim.Config{Seed: 3, Loss: 0.02, Delay: 20 * time.Microsecond, Jitter: 30 * time.Microsecond})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	rng := rand.New(rand.NewPCG(3, 2))
	var ids []uint64
	var at time.Duration
	for i := range rpcs {
		at += time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		req := request(uint64(i), 100_000+rng.IntN(contract.MaxMessage-100_000))
		n.After(at, func() { ids = append(ids, send(t, cli, serverAP, req)) })
	}
	seen := false // an unwatched message, reported once
	n.RunUntil(func() bool {
		seen = seen || unwatched(t, n, srv, cli)
		return len(got) == rpcs
	}, at+30*time.Second)
	if st := srv.Core.Stats(); st.GrantsDeferred == 0 {
		t.Errorf("the server parked no message for memory: the test tests nothing")
	}
	ended := 0
	for _, id := range ids {
		if got[id] != nil {
			ended++
		}
	}
	if ended != rpcs {
		t.Errorf("%d of %d RPCs ended (completed or failed) %v after the last started", ended, rpcs, n.Now()-at)
	}
}

// TestLeastMemoryCompletes: with the least receive memory a core allows,
// four requests of about 1 MB from one client all complete. The least
// was the largest message beside the grants outstanding, but a message
// at its peak holds more: when a quarter of it has come it takes its
// whole buffer (1 MiB for 1 MB, the pool's size class) while still
// holding the packets it kept (up to its length). Below that, no 1 MB
// message could ever take its buffer: each request's packets were
// dropped for memory, or another request shed to make room, for ever.
func TestLeastMemoryCompletes(t *testing.T) {
	n := sim.New(sim.Config{Seed: 1})
	srv := n.Listen(serverAP, core.Config{Limits: contract.Limits{RecvMemory: 1}})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	got := collect(cli)
	const rpcs = 4
	for i := range rpcs {
		send(t, cli, serverAP, request(uint64(i), contract.MaxMessage-i))
	}
	if !n.RunUntil(func() bool { return len(got) == rpcs }, 10*time.Second) {
		var b strings.Builder
		b.Write(srv.Core.AppendDescription(nil, n.Now(), 10))
		t.Fatalf("%d of %d RPCs ended after 10 s; the server holds:\n%s", len(got), rpcs, b.String())
	}
	for id, m := range got {
		if m.Err != nil {
			t.Errorf("RPC %d: %v", id, m.Err)
		}
	}
}
