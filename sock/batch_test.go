package sock_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/homa-go/homa/sock"
)

// SendBatch starts RPCs whose responses come back with their cookies;
// ReplyBatch answers requests taken one by one; a request to a client
// port stops the batch before anything is sent.
func TestSendBatch(t *testing.T) {
	// A server that answers what it took in batches of two.
	server, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:27431"), &sock.Config{Transport: sock.UDP})
	if err != nil {
		t.Skipf("no server socket: %v", err)
	}
	defer server.Close()
	go func() {
		for {
			a, err := server.Recv(context.Background(), sock.Any)
			if err != nil {
				return
			}
			b, err := server.Recv(context.Background(), sock.Any)
			if err != nil {
				return
			}
			// A failure shows as a missing or wrong response below.
			_ = server.ReplyBatch([]sock.BatchResponse{{Req: a, Data: a.Data}, {Req: b, Data: b.Data}})
			a.Release()
			b.Release()
		}
	}()
	client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), &sock.Config{Transport: sock.UDP})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const n = 8
	reqs := make([]sock.BatchRequest, n)
	for i := range reqs {
		reqs[i] = sock.BatchRequest{Dst: server.LocalAddr(), Data: []byte(fmt.Sprint("request ", i)), Cookie: uint64(i + 1)}
	}
	ids, err := client.SendBatch(reqs)
	if err != nil || len(ids) != n {
		t.Fatalf("SendBatch: %v, %d ids", err, len(ids))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range n {
		m, err := client.Recv(ctx, sock.Any)
		if err != nil {
			t.Fatal(err)
		}
		i := int(m.Cookie) - 1
		if i < 0 || i >= n || string(m.Data) != fmt.Sprint("request ", i) || m.ID != ids[i] {
			t.Errorf("response %q, cookie %d, id %d: not request %d's (id %d)", m.Data, m.Cookie, m.ID, i, ids[max(i, 0)%n])
		}
		m.Release()
	}
	bad := append([]sock.BatchRequest{}, reqs[0], sock.BatchRequest{Dst: client.LocalAddr(), Data: []byte("x")})
	if ids, err := client.SendBatch(bad); err == nil || ids[0] != 0 {
		t.Errorf("a batch with a request to a client port: %v, ids %v; want an error and nothing sent", err, ids)
	}
	if err := server.ReplyBatch([]sock.BatchResponse{{Req: &sock.Message{ID: 2}, Data: []byte("x")}}); err == nil {
		t.Error("ReplyBatch answered a response")
	}
}

// A Batch's Sends and Replies reach their peers once flushed, with ids
// known at Send; a request to a client port is refused at Send.
func TestBatchObject(t *testing.T) {
	server, client := openPair(t, "127.0.0.1", sock.UDP, 27432)
	b := client.NewBatch()
	ids := map[uint64]int{}
	for i := range 4 {
		id, err := b.Send(server.LocalAddr(), []byte(fmt.Sprint("request ", i)), uint64(i))
		if err != nil || id == 0 {
			t.Fatalf("Batch.Send: %d, %v", id, err)
		}
		ids[id] = i
	}
	if _, err := b.Send(client.LocalAddr(), []byte("x"), 0); err == nil {
		t.Error("Batch.Send to a client port succeeded")
	}
	b.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 4 {
		m, err := client.Recv(ctx, sock.Any)
		if err != nil {
			t.Fatal(err)
		}
		if i, ok := ids[m.ID]; !ok || string(m.Data) != fmt.Sprint("request ", i) || m.Cookie != uint64(i) {
			t.Errorf("response %q id %d cookie %d: not one of the batch's", m.Data, m.ID, m.Cookie)
		}
		m.Release()
	}
	if err := b.Reply(&sock.Message{ID: 2}, []byte("x")); err == nil {
		t.Error("Batch.Reply answered a response")
	}
}
