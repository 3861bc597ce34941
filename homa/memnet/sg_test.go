package memnet

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/homa/netio"
)

// TestMemPayload checks Scatter-gather writes on the in-memory network:
// header and payload arrive as one packet, byte for byte, on both
// families; the network copied both parts.
func TestMemPayload(t *testing.T) {
	memPairs(t, Config{MTU: 9000}, func(t *testing.T, a, b netio.Conn, src, dst netip.Addr) {
		whole, pkts := payloadBatch(a.Port(), b.Port(), dst, a.MaxPacket(dst), 0x100)
		if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		want := make([][]byte, len(whole))
		for i := range whole {
			want[i] = bytes.Clone(whole[i])
		}
		for i := range pkts { // the network has its own copy
			pkts[i].Buf[0] ^= 0xff
			if k := len(pkts[i].Payload); k > 0 {
				pkts[i].Payload[k-1] ^= 0xff
			}
		}
		checkReceived(t, readN(t, b, len(want)), want, src)
	})
}

// TestMemPayloadChecks checks that the size limit counts the payload and
// that the Drop hook sees the whole packet.
func TestMemPayloadChecks(t *testing.T) {
	var mu sync.Mutex
	var seen [][]byte
	n := New(Config{Drop: func(src, dst netip.Addr, pkt []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, bytes.Clone(pkt))
		return tagOf(pkt) == 2
	}})
	defer n.Close()
	a, b := memOpen(t, n, hostA, 0), memOpen(t, n, hostB, 0)
	max := a.MaxPacket(hostB)
	fits := testPacket(a.Port(), b.Port(), max, 1)
	dropped := testPacket(a.Port(), b.Port(), 500, 2)
	big := testPacket(a.Port(), b.Port(), max+1, 3)
	pkts := []netio.Packet{withPayload(fits, 60, hostB, 0), withPayload(dropped, 60, hostB, 0), withPayload(big, 60, hostB, 0)}
	if k, err := a.WriteBatch(pkts); k != 2 || !errors.Is(err, netio.ErrBadPacket) {
		t.Fatalf("WriteBatch with a packet of MaxPacket+1 bytes = %d, %v; want 2, netio.ErrBadPacket", k, err)
	}
	if len(seen) != 2 || !bytes.Equal(seen[0], fits) || !bytes.Equal(seen[1], dropped) {
		t.Fatalf("the Drop hook saw %d packets, want the 2 whole packets written", len(seen))
	}
	checkReceived(t, readN(t, b, 1), [][]byte{fits}, hostA)
	if s := n.Stats(); s.Sent != 2 || s.DroppedHook != 1 || s.Delivered != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestMemBorrow checks BorrowReader on the in-memory network: packets
// come in the network's buffers, stay intact until the next read, and go
// back to the network after it (and at Close).
func TestMemBorrow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{ReportUnreachable: true})
		defer n.Close()
		a, b := memOpen(t, n, hostA, 0), memOpen(t, n, hostB, 0)
		br := b.(netio.BorrowReader)
		var sent [][]byte
		for i := range 10 {
			sent = append(sent, testPacket(a.Port(), b.Port(), 100+i, uint64(i)))
		}
		writeAll(t, a, hostB, 0, sent...)
		mine := make([]byte, 2048)
		pkts := []netio.Packet{{Buf: mine}, {Buf: mine}, {Buf: mine}, {Buf: mine}}
		k, err := br.TryReadBorrowed(pkts)
		if k != 4 || err != nil {
			t.Fatalf("TryReadBorrowed = %d, %v", k, err)
		}
		for i, p := range pkts[:k] {
			if len(p.Buf) != p.N || &p.Buf[0] == &mine[0] || !bytes.Equal(p.Bytes(), sent[i]) {
				t.Fatalf("borrowed packet %d: %d bytes in a Buf of %d, want the %d sent, in the network's buffer", i, p.N, len(p.Buf), len(sent[i]))
			}
		}
		held := pkts[0].Buf
		writeAll(t, a, hostB, 0, testPacket(a.Port(), b.Port(), 100, 99))
		if !bytes.Equal(held, sent[0]) {
			t.Fatal("a borrowed packet changed before the next read")
		}
		// A copying read after a borrowed one: Bufs of the caller's again.
		got := readN(t, b, 7)
		if tagOf(got[0].data) != 4 || tagOf(got[6].data) != 99 {
			t.Fatalf("after the borrowed read, tags %#x..%#x, want 4..99", tagOf(got[0].data), tagOf(got[6].data))
		}
		// Reports are lent too.
		writeAll(t, a, hostB, 0, testPacket(a.Port(), 7, 100, 0x77))
		ra := a.(netio.BorrowReader)
		done := make(chan struct{})
		go func() {
			defer close(done)
			k, err := ra.ReadBorrowed(pkts[:1])
			if k != 1 || err != nil || pkts[0].Unreachable != netio.UnreachablePort || tagOf(pkts[0].Bytes()) != 0x77 {
				t.Errorf("ReadBorrowed of a report = %d, %v, %v", k, err, pkts[0].Unreachable)
			}
		}()
		<-done
		if c := b.(*conn); len(c.lent) != 0 {
			t.Errorf("%d packets still lent after a copying read", len(c.lent))
		}
		a.Close()
		if c := a.(*conn); len(c.lent) != 0 {
			t.Errorf("%d packets still lent after Close", len(c.lent))
		}
		if _, err := ra.TryReadBorrowed(pkts); err == nil {
			t.Error("TryReadBorrowed on a closed netio.Conn succeeded")
		}
	})
}

// TestMemWriteAllocs checks that Scatter-gather writes and both kinds of
// read, with Land on every other Packet, cost no allocation per packet
// on the in-memory network.
func TestMemWriteAllocs(t *testing.T) {
	n := New(Config{})
	defer n.Close()
	a, b := memOpen(t, n, hostA, 0), memOpen(t, n, hostB, 0)
	_, out := payloadBatch(a.Port(), b.Port(), hostB, a.MaxPacket(hostB), 1)
	in := makePackets(len(out), 2048)
	for i := 0; i < len(in); i += 2 {
		in[i].Land = make([]byte, 1024)
	}
	for _, borrow := range []bool{false, true} {
		read := tryReader(b, borrow)
		step := func() {
			if k, err := a.WriteBatch(out); k != len(out) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", k, err)
			}
			if k, err := read(in); k != len(out) || err != nil {
				t.Fatalf("read %d, %v", k, err)
			}
		}
		// A borrowed read holds its packets through the next write: the
		// free list fills in the first rounds.
		for range 3 {
			step()
		}
		if allocs := testing.AllocsPerRun(50, step); allocs != 0 {
			t.Errorf("borrow %v: %v allocations per batch of %d packets, want 0", borrow, allocs, len(out))
		}
	}
}

// tryReader is c's non-blocking read: into the caller's buffers, or
// borrowed.
func tryReader(c netio.Conn, borrow bool) func([]netio.Packet) (int, error) {
	if borrow {
		return c.(netio.BorrowReader).TryReadBorrowed
	}
	return c.(netio.Poller).TryReadBatch
}
