package homa_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
)

// TestOneProcessorYieldsToParked: with one processor, a client spinning
// for its response stops once its request waits for a server of the
// same process parked on its socket (the processor would otherwise
// never poll the network for the server: the round trip lasted the
// spin), and two endpoints answering each other back to back still spin
// in turn rather than both park (see One processor). The spinner is
// always runnable, so the server cannot wake while it spins: the cut is
// certain, not a race. With more processors nothing is cut.
func TestOneProcessorYieldsToParked(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// Spins long enough that a slow machine (or the race detector) does
	// not park the ends between RPCs back to back: parks then come from
	// the rule alone.
	cfg := homa.Config{PollDuration: 5 * time.Millisecond}
	client, server, dst := udpEchoPairConfigs(t, cfg, cfg)
	call := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id, err := client.Send(dst, make([]byte, 100), 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.Recv(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	}
	// The server's goroutine spins a while for a request, then parks on
	// its socket; a call made then finds it parked, unless something
	// (a timer of its own) woke it meanwhile: a few tries.
	for try := 0; homa.SpinsCut(client) == 0; try++ {
		if try == 20 {
			t.Fatal("the client spun for its response while the server, parked in this process, held its request")
		}
		awaitParked(t, server)
		call()
	}

	const rpcs = 300
	cut, parks := homa.SpinsCut(client)+homa.SpinsCut(server), wakesOf(client).parks+wakesOf(server).parks
	for range rpcs {
		call()
	}
	cut = homa.SpinsCut(client) + homa.SpinsCut(server) - cut
	parks = wakesOf(client).parks + wakesOf(server).parks - parks
	// Both parking at every RPC would be a cut and a park per RPC and
	// side; spinning in turn, a few at the start.
	if cut > rpcs/4 || parks > rpcs/4 {
		t.Errorf("back to back: %d spins cut and %d parks in %d RPCs; the ends settled on parking", cut, parks, rpcs)
	}

	runtime.GOMAXPROCS(2)
	c2, s2, dst2 := udpEchoPair(t)
	awaitParked(t, s2)
	id, err := c2.Send(dst2, make([]byte, 100), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c2.Recv(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	m.Release()
	if n := homa.SpinsCut(c2); n != 0 {
		t.Errorf("with two processors a spin was cut %d times", n)
	}
}

// awaitParked waits until e's reader is parked on its socket.
func awaitParked(t *testing.T, e *homa.Endpoint) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !homa.ReaderParked(e) {
		if time.Now().After(deadline) {
			t.Fatal("the endpoint's reader did not park in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
