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
