package core_test

import (
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
)

// BenchmarkSimRPC100: the protocol work of one 100-byte RPC, both cores
// together, on the simulator (no I/O, no goroutines): the client's send
// and completion, the server's request, reply and acknowledgment. Each
// RPC gets a second of simulated time from its start: RunUntil's limit
// is a point on the virtual clock, which passes 1 s after some 250,000
// RPCs of 4 µs.
func BenchmarkSimRPC100(b *testing.B) {
	n := sim.New(sim.Config{Seed: 1})
	srv := n.Listen(serverAP, core.Config{})
	echo(srv, n, 0, nil)
	cli := n.Listen(clientAP, core.Config{})
	done := 0
	cli.OnMessage = func(*sim.Endpoint, *contract.Message) { done++ }
	req := request(1, 100)
	b.ReportAllocs()
	for b.Loop() {
		want := done + 1
		if _, err := cli.Send(serverAP, req, 0); err != nil {
			b.Fatal(err)
		}
		if !n.RunUntil(func() bool { return done == want }, n.Now()+time.Second) {
			b.Fatal("RPC did not complete")
		}
	}
}
