package homa_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/netio"
)

// batchPair opens a client and a server endpoint on UDP loopback without
// segmentation offload (a packet a datagram, so that system calls count
// as batches), closed when the test ends; it returns their Conns too.
func batchPair(t *testing.T) (client, server *homa.Endpoint, cc, sc netio.Conn, dst netip.AddrPort) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	sc, err := netio.OpenUDP(lo, 0, &netio.Options{DisableGSO: true})
	if err != nil {
		t.Fatalf("no UDP socket on loopback: %v", err)
	}
	cc, err = netio.OpenUDP(lo, 0, &netio.Options{DisableGSO: true})
	if err != nil {
		t.Fatal(err)
	}
	// The tests count the system calls that sent something: no RESEND
	// (of a client whose test goroutine a loaded machine delays for
	// milliseconds), BUSY in answer or NEED_ACK may come in between.
	cfg := homa.Config{PollDuration: -1}
	cfg.Resend.ResendTicks = 1000
	cfg.Ack.RequestAckTicks = 1000
	server = homa.NewEndpoint(sc, cfg)
	t.Cleanup(func() { server.Close() })
	client = homa.NewEndpoint(cc, cfg)
	t.Cleanup(func() { client.Close() })
	return client, server, cc, sc, netip.AddrPortFrom(lo, server.Port())
}

// sendCalls is how many sendmmsg calls c made that sent something.
func sendCalls(t *testing.T, c netio.Conn) uint64 {
	t.Helper()
	sc, ok := c.(netio.StatsConn)
	if !ok {
		t.Skip("the Conn keeps no statistics")
	}
	return sc.Stats().SendCalls
}

// SendBatch sends many requests with one system call, and ReplyBatch
// many responses: a batch of completions costs one sendmmsg, not one a
// message. Ids come back in order, and each response carries its
// request's cookie.
func TestSendReplyBatch(t *testing.T) {
	client, server, cc, sc, dst := batchPair(t)
	const n = 12
	reqs := make([]contract.BatchRequest, n)
	for i := range reqs {
		reqs[i] = contract.BatchRequest{Dst: dst, Data: []byte(fmt.Sprintf("request %d", i)), Cookie: uint64(100 + i)}
	}
	ids := make([]uint64, n)
	before := sendCalls(t, cc)
	if err := client.SendBatch(reqs, ids); err != nil {
		t.Fatal(err)
	}
	if got := sendCalls(t, cc) - before; got != 1 {
		t.Errorf("SendBatch of %d requests made %d sendmmsg calls, want 1", n, got)
	}
	seen := map[uint64]bool{}
	for i, id := range ids {
		if id == 0 || seen[id] {
			t.Fatalf("ids %v: id %d of request %d is zero or repeated", ids, id, i)
		}
		seen[id] = true
	}

	// The server takes every request, then answers all in one batch.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rs []contract.BatchResponse
	var held []*contract.Message
	for len(rs) < n {
		m, err := server.Recv(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, m)
		rs = append(rs, contract.BatchResponse{Peer: m.Peer.Addr(), ID: m.ID, Data: append([]byte("echo "), m.Data...)})
	}
	before = sendCalls(t, sc)
	if err := server.ReplyBatch(rs); err != nil {
		t.Fatal(err)
	}
	if got := sendCalls(t, sc) - before; got != 1 {
		t.Errorf("ReplyBatch of %d responses made %d sendmmsg calls, want 1", n, got)
	}
	for _, m := range held {
		m.Release()
	}
	for i, id := range ids {
		m, err := client.Recv(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("echo request %d", i); string(m.Data) != want || m.Cookie != uint64(100+i) || m.Err != nil {
			t.Errorf("response %d: %q cookie %d err %v, want %q cookie %d", i, m.Data, m.Cookie, m.Err, want, 100+i)
		}
		m.Release()
	}
	// A bad request stops the batch where it is: those before it went.
	bad := []contract.BatchRequest{reqs[0], {Dst: netip.AddrPortFrom(dst.Addr(), 0), Data: []byte("x")}, reqs[1]}
	ids = make([]uint64, len(bad))
	if err := client.SendBatch(bad, ids); err == nil || ids[0] == 0 || ids[2] != 0 {
		t.Errorf("batch with a bad request: %v, ids %v; want an error, the first sent, the last not", err, ids)
	}
}

// A Batch does the protocol work of its Sends at once (the ids are
// known) and sends nothing until Flush, which sends it all with one
// system call; its Replies likewise.
func TestBatchFlush(t *testing.T) {
	client, server, cc, sc, dst := batchPair(t)
	b := client.NewBatch()
	before := sendCalls(t, cc)
	var ids []uint64
	for i := range 3 {
		id, err := b.Send(dst, []byte(fmt.Sprint("request ", i)), uint64(i))
		if err != nil || id == 0 {
			t.Fatalf("Batch.Send: %d, %v", id, err)
		}
		ids = append(ids, id)
	}
	if got := sendCalls(t, cc) - before; got != 0 {
		t.Fatalf("%d sendmmsg calls before Flush, want 0", got)
	}
	b.Flush()
	if got := sendCalls(t, cc) - before; got != 1 {
		t.Errorf("Flush made %d sendmmsg calls, want 1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sb := server.NewBatch()
	for range 3 {
		m, err := server.Recv(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Reply(m.Peer.Addr(), m.ID, m.Data); err != nil {
			t.Fatal(err)
		}
		m.Release()
	}
	before = sendCalls(t, sc)
	sb.Flush()
	if got := sendCalls(t, sc) - before; got != 1 {
		t.Errorf("the server's Flush made %d sendmmsg calls, want 1", got)
	}
	for i, id := range ids {
		m, err := client.Recv(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != fmt.Sprint("request ", i) || m.Cookie != uint64(i) {
			t.Errorf("response %d: %q cookie %d", i, m.Data, m.Cookie)
		}
		m.Release()
	}
}
