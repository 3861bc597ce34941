package core

import (
	"net/netip"
	"testing"

	"github.com/homa-go/homa/homa/wire"
)

// request builds the single DATA packet of a 100-byte request from
// client port 40000, acknowledging ackID (0: nothing).
func request(id, ackID uint64) []byte {
	d := wire.Data{Common: wire.Common{SrcPort: 40000, DstPort: 500, SenderID: id}, MessageLength: 100, Incoming: 100, SegOffset: wire.OffsetNone, Payload: make([]byte, 100)}
	if ackID != 0 {
		d.Ack = wire.AckEntry{ClientID: ackID, ServerPort: 500}
	}
	return d.Append(nil)
}

// TestIdleDefersAcks: a piggybacked acknowledgment frees its server RPC
// only at Idle (or Tick, or when maxLateAcks wait), after the request
// that carried it was delivered; Idle also prepares the next Message.
func TestIdleDefersAcks(t *testing.T) {
	c := New(Local{Port: 500}, Config{})
	client := netip.MustParseAddr("10.0.0.2")
	var out Output
	reply := func(id uint64) {
		t.Helper()
		c.Delivered(client, id|1)
		if err := c.Reply(client, id|1, make([]byte, 100), 1500, 0, &out); err != nil {
			t.Fatal(err)
		}
		out.Reset()
	}
	c.Handle(request(2, 0), client, 0, &out)
	if len(out.Messages) != 1 {
		t.Fatalf("%d messages, want the request", len(out.Messages))
	}
	out.Reset()
	reply(2)
	if !c.IdleWork() {
		t.Fatal("no idle work: the next Message is not prepared")
	}
	c.Idle(0, &out)
	spare := c.spare
	if spare == nil || c.IdleWork() {
		t.Fatalf("after Idle: spare %p, idle work %v", spare, c.IdleWork())
	}

	// The next request acknowledges RPC 2: it is delivered (in the
	// prepared Message) while RPC 2 waits for Idle.
	c.Handle(request(4, 2), client, 0, &out)
	if len(out.Messages) != 1 || out.Messages[0] != spare {
		t.Fatal("the request was not delivered in the Message Idle prepared")
	}
	out.Reset()
	if n := c.Stats().ServerRPCs; n != 2 {
		t.Fatalf("%d server RPCs before Idle, want 2 (the acknowledged one waits)", n)
	}
	c.Idle(0, &out)
	if n := c.Stats().ServerRPCs; n != 1 || c.servers.get(client, 3) != nil {
		t.Fatalf("%d server RPCs after Idle, want 1: RPC 2 freed", n)
	}

	// Without Idle, Tick frees acknowledged RPCs; and no more than
	// maxLateAcks wait.
	reply(4)
	c.Handle(request(6, 4), client, 0, &out)
	out.Reset()
	c.Tick(0, &out)
	if c.servers.get(client, 5) != nil {
		t.Fatal("Tick left the acknowledged RPC 4")
	}
	id := uint64(6)
	for range 2 * maxLateAcks {
		reply(id)
		c.Handle(request(id+2, id), client, 0, &out)
		out.Reset()
		id += 2
		if len(c.lateAcks) > maxLateAcks {
			t.Fatalf("%d acknowledgments wait", len(c.lateAcks))
		}
	}
	if n := c.Stats().ServerRPCs; n > maxLateAcks+1 {
		t.Fatalf("%d server RPCs held without Idle, want at most %d", n, maxLateAcks+1)
	}
	c.Idle(0, &out)
	if n := c.Stats().ServerRPCs; n != 1 {
		t.Fatalf("%d server RPCs after Idle, want 1", n)
	}
}

// TestIdleFreesClients: a client RPC whose response completed leaves
// the RPC table at once (a late packet finds nothing), and its
// structure and request buffer return at Idle.
func TestIdleFreesClients(t *testing.T) {
	c := New(Local{Port: 40000}, Config{})
	server := netip.MustParseAddrPort("10.0.0.1:500")
	var out Output
	id, err := c.Send(server, make([]byte, 100), 0, 1500, 0, &out)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	c.Idle(0, &out)
	free := len(c.freeRPCs)
	resp := wire.Data{Common: wire.Common{SrcPort: 500, DstPort: 40000, SenderID: id | 1}, MessageLength: 100, Incoming: 100, SegOffset: wire.OffsetNone, Payload: make([]byte, 100)}
	pkt := resp.Append(nil)
	c.Handle(pkt, server.Addr(), 0, &out)
	if len(out.Messages) != 1 || out.Messages[0].ID != id {
		t.Fatalf("messages %v, want the response", out.Messages)
	}
	out.Reset()
	if n := c.Stats().ClientRPCs; n != 0 {
		t.Fatalf("%d client RPCs after the response, want 0", n)
	}
	if len(c.freeRPCs) != free || c.peers[server.Addr()].rpcs != 1 {
		t.Fatal("the RPC was recycled on the response's path")
	}
	c.Handle(pkt, server.Addr(), 0, &out) // a duplicate: nothing to find
	if len(out.Messages) != 0 {
		t.Fatal("a duplicate response was delivered")
	}
	c.Idle(0, &out)
	if len(c.freeRPCs) != free+1 || c.peers[server.Addr()].rpcs != 0 {
		t.Fatalf("after Idle: %d free RPCs (want %d), peer holds %d RPCs", len(c.freeRPCs), free+1, c.peers[server.Addr()].rpcs)
	}
}
