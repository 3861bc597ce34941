package homa_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
)

// TestSendBorrowed: a borrowed request is sent from the caller's buffer
// (or, below core.ZeroCopyMin, copied) and answered; the endpoint is done
// with the buffer once the response came, and never puts it into its
// buffer pool, even when its capacity is one of the pool's sizes.
func TestSendBorrowed(t *testing.T) {
	for _, size := range []int{100, 100_000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) { testSendBorrowed(t, size) })
	}
}

func testSendBorrowed(t *testing.T, size int) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newMemPair(t, memnet.Config{Seed: 41, MTU: 1500}, homa.Config{})
		req := make([]byte, size, 128<<10) // a pool size class
		copy(req, payload(41, len(req)))
		for range 3 {
			id, b, err := p.client.SendBorrowed(p.dst, req, 0)
			if err != nil {
				t.Fatal(err)
			}
			m, err := p.client.Recv(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			b.Wait()
			if !bytes.Equal(m.Data, req) {
				t.Fatal("echo differs from the borrowed request")
			}
			m.Release()
		}
		if homa.Pooled(req, p.client) {
			t.Fatal("the borrowed buffer went into the buffer pool")
		}
	})
}

// TestSendBorrowedAbort: after Abort, Wait returns: nothing reads the
// buffer any more, though the server never answered.
func TestSendBorrowedAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{Seed: 42, MTU: 1500})
		cc, _ := nw.Open(clientAddr, 0)
		c := homa.NewEndpoint(cc, homa.Config{PollDuration: -1})
		defer c.Close()
		req := make([]byte, 500_000)
		id, b, err := c.SendBorrowed(netip.AddrPortFrom(serverAddr, 500), req, 0)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := c.Abort(id); err != nil {
			t.Fatal(err)
		}
		b.Wait()
		if _, err := c.Recv(context.Background(), id); !errors.Is(err, contract.ErrUnknownRPC) {
			t.Fatalf("Recv after Abort: %v", err)
		}
	})
}
