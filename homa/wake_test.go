package homa_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"net/netip"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
)

// TestRecvParkedWakes: a goroutine in Recv parked reading the socket
// wakes when its context ends, when its RPC is aborted, and when the
// endpoint closes.
func TestRecvParkedWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 30})
		cc, _ := nw.Open(clientAddr, 0)
		c := homa.NewEndpoint(cc, homa.Config{PollDuration: -1})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := c.Recv(ctx, 0)
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv after cancel: %v", err)
		}
		id, _ := c.Send(netip.AddrPortFrom(serverAddr, 500), []byte("x"), 0)
		go func() {
			m, err := c.Recv(context.Background(), id)
			if err == nil {
				err = m.Err
			}
			done <- err
		}()
		synctest.Wait()
		c.Abort(id)
		if err := <-done; !errors.Is(err, contract.ErrAborted) {
			t.Fatalf("Recv after Abort: %v", err)
		}
		go func() {
			_, err := c.Recv(context.Background(), 0)
			done <- err
		}()
		synctest.Wait()
		time.Sleep(time.Millisecond)
		c.Close()
		if err := <-done; !errors.Is(err, contract.ErrClosed) {
			t.Fatalf("Recv after Close: %v", err)
		}
	})
}

// TestStealersTakeTurns: goroutines that find the background reader
// parked on the socket wake it to read for themselves; when several do
// at once, one takes the socket and the others wait for it to leave (or
// for their messages). None waits for a socket nobody reads: every RPC
// completes well before its peer would time out. Each round leaves the
// background reader parked (a pending acknowledgment keeps the endpoint
// from being quiet) and then starts several RPCs together.
func TestStealersTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 31}, homa.Config{})
		const rounds, together = 200, 8
		before := p.client.Stats().ReaderSteals
		for round := range rounds {
			errs := make(chan error, together)
			for i := range together {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer cancel()
					errs <- p.call(ctx, t, payload(uint64(round*together+i), 3000*(i+1)))
				}()
			}
			for range together {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			time.Sleep(time.Millisecond) // past the grace: the background reader parks
		}
		t.Logf("steals %d", p.client.Stats().ReaderSteals-before)
		if p.client.Stats().ReaderSteals == before {
			t.Fatal("no goroutine took the socket from the background reader: the test tests nothing")
		}
	})
}
