package homa_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
)

// TestEchoRawShared runs echo RPCs of several sizes from more raw client
// Endpoints than a process gives sockets of their own (see
// netio.OpenRaw), all at once: the clients whose Conns share a socket
// get their own responses, whole, as the others do.
func TestEchoRawShared(t *testing.T) {
	addr := netip.MustParseAddr("127.0.0.1")
	sc, err := netio.OpenRaw(addr, 23003, nil)
	if errors.Is(err, netio.ErrPermission) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	const clients = 8
	var pairs []*pair
	shared := 0
	for i := range clients {
		cc, err := netio.OpenRaw(addr, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cc.(netio.StatsConn).Stats().Shared {
			shared++
		}
		if i == 0 {
			pairs = append(pairs, startPair(t, homa.NewEndpoint(sc, homa.Config{}), homa.NewEndpoint(cc, homa.Config{})))
			continue
		}
		c := homa.NewEndpoint(cc, homa.Config{})
		t.Cleanup(func() { c.Close() })
		pairs = append(pairs, &pair{server: pairs[0].server, client: c, dst: pairs[0].dst})
	}
	if shared == 0 {
		t.Fatalf("none of %d client Conns shares a socket", clients)
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i, p := range pairs {
		wg.Go(func() {
			for _, n := range []int{1, 100, 5000, 200_000} {
				if err := p.call(withTimeout(t, 20*time.Second), t, payload(uint64(i), n)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
