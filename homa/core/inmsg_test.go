package core

import (
	"bytes"
	"testing"

	"github.com/homa-go/homa/contract"
	"pgregory.net/rapid"
)

// TestInMsgReassembly checks reassembly against a model: a message is
// delivered as random, overlapping, duplicated and reordered fragments,
// from receive buffers the core may keep; the message taken at the end
// equals the original, received counts distinct bytes, the span list
// stays sorted, disjoint and merged, storage is committed only for
// packets that brought new bytes, and every buffer goes back.
func TestInMsgReassembly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		length := rapid.OneOf(rapid.IntRange(1, segmentMin-1), rapid.IntRange(segmentMin, 3*segmentMin+7), rapid.IntRange(60_000, 200_000)).Draw(t, "length")
		msg := make([]byte, length)
		for i, seed := 0, rapid.Uint64().Draw(t, "seed"); i < length; i++ {
			seed = seed*6364136223846793005 + 1442695040888963407
			msg[i] = byte(seed >> 56)
		}
		bufs := &countingBuffers{}
		var m inMsg
		m.init(uint32(length), 100)
		seen := make([]bool, length)
		received := 0
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		maxPkt := rapid.SampledFrom([]int{1400, 9000, 65_000}).Draw(t, "packet")
		for i := 0; i < steps || !m.complete(); i++ {
			var off, n int
			if i < steps {
				off = rapid.IntRange(0, length-1).Draw(t, "off")
				n = rapid.IntRange(1, min(length-off, maxPkt)).Draw(t, "n")
			} else {
				// Fill the first hole so the run ends complete.
				for seen[off] {
					off++
				}
				for n = 1; off+n < length && !seen[off+n] && n < maxPkt; n++ {
				}
			}
			// The packet as a receive buffer: room for a header and the
			// largest packet, the payload after the header.
			pkt := bufs.Get(maxPkt + 64)
			copy(pkt[64:], msg[off:off+n])
			payload := pkt[64 : 64+n]
			fresh := 0
			for k := off; k < off+n; k++ {
				if !seen[k] {
					fresh++
					seen[k] = true
				}
			}
			if m.fresh(uint32(off), uint32(off+n)) != (fresh > 0) {
				t.Fatalf("fresh(%d, %d) = %v with %d new bytes", off, off+n, !(fresh > 0), fresh)
			}
			if fresh == 0 {
				bufs.Put(pkt)
				continue
			}
			own := rapid.Bool().Draw(t, "own")
			keep, need := m.plan(payload, pkt, own)
			if keep && !own {
				t.Fatal("plan keeps a buffer it does not own")
			}
			added, committed := m.store(uint32(off), payload, pkt, keep, bufs)
			if int(added) != fresh {
				t.Fatalf("store(%d, %d bytes) = %d new bytes, want %d", off, n, added, fresh)
			}
			if committed > need {
				t.Fatalf("store committed %d bytes, plan said at most %d", committed, need)
			}
			if !keep {
				bufs.Put(pkt)
			}
			checkSpans(t, &m, fresh, &received)
			if bufs.held != m.mem {
				t.Fatalf("storage: message counts %d bytes, %d held", m.mem, bufs.held)
			}
		}
		data, backing, mem := m.take(bufs)
		if !bytes.Equal(data, msg) {
			t.Fatalf("reassembled message differs")
		}
		if mem != cap(backing) || m.mem != 0 || bufs.held != cap(backing) {
			t.Fatalf("after take: %d bytes committed, %d left in the message, %d held; want %d, 0, %d", mem, m.mem, bufs.held, cap(backing), cap(backing))
		}
		bufs.Put(backing)
		if bufs.held != 0 {
			t.Fatalf("%d bytes never went back", bufs.held)
		}
	})
}

// countingBuffers hands out exact-size slices and counts what is held.
type countingBuffers struct{ held int }

func (b *countingBuffers) Get(n int) []byte { b.held += n; return make([]byte, n) }
func (b *countingBuffers) Put(p []byte)     { b.held -= cap(p) }

// checkSpans checks the span list against the model's count of distinct
// bytes received (updated with this step's fresh bytes).
func checkSpans(t *rapid.T, m *inMsg, fresh int, received *int) {
	var total uint32
	for i, s := range m.have {
		if s.Start >= s.End {
			t.Fatalf("empty span %v", s)
		}
		if i > 0 && m.have[i-1].End >= s.Start {
			t.Fatalf("spans %v and %v overlap or touch", m.have[i-1], s)
		}
		total += s.End - s.Start
	}
	if total != m.received {
		t.Fatalf("spans hold %d bytes, received says %d", total, m.received)
	}
	*received += fresh
	if int(m.received) != *received {
		t.Fatalf("received %d, model %d", m.received, *received)
	}
}

func TestIDs(t *testing.T) {
	const start = 1_767_322_045_000_000 // 2026-01-02 in µs
	a := New(Local{Port: 40000, FirstID: FirstID(start)}, Config{})
	b := New(Local{Port: 40001, FirstID: FirstID(start)}, Config{})
	prev := uint64(0)
	seen := map[uint64]bool{}
	for range 1000 {
		for _, c := range []*Core{a, b} {
			id := c.newID()
			if id&1 != 0 || id == 0 {
				t.Fatalf("client id %#x is odd or zero", id)
			}
			if seen[id] {
				t.Fatalf("id %#x issued twice", id)
			}
			seen[id] = true
		}
	}
	for range 100 {
		id := a.newID()
		if id <= prev {
			t.Fatalf("ids not increasing: %#x after %#x", id, prev)
		}
		prev = id
	}
	// A later process on the same port continues above.
	c := New(Local{Port: 40000, FirstID: FirstID(start + 1e6)}, Config{})
	if id := c.newID(); id <= prev {
		t.Fatalf("restarted source issued %#x, not above %#x", id, prev)
	}
}

// TestInMsgJoins: a message longer than segmentMin that comes in small
// packets keeps them apart until a quarter of it has arrived, then joins
// a buffer of its own length, and later packets go straight there; the
// message taken at the end is that buffer. Storage stays within four
// times what arrived.
func TestInMsgJoins(t *testing.T) {
	const length, pkt = 100_000, 1400
	bufs := &countingBuffers{}
	var m inMsg
	m.init(length, length)
	var whole []byte
	for off := 0; off < length; off += pkt {
		n := min(pkt, length-off)
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(off + i)
		}
		keep, need := m.plan(payload, payload, false)
		_, committed := m.store(uint32(off), payload, payload, keep, bufs)
		if keep || committed > need {
			t.Fatalf("offset %d: keep %v, committed %d of %d planned", off, keep, committed, need)
		}
		if m.mem > 4*int(m.received) && m.mem > segmentMin {
			t.Fatalf("offset %d: %d bytes held for %d received", off, m.mem, m.received)
		}
		joined := 4*int(m.received) >= length
		if (m.whole != nil) != joined {
			t.Fatalf("offset %d: %d of %d bytes received, joined %v", off, m.received, length, m.whole != nil)
		}
		if joined && whole == nil {
			whole = m.whole
		}
	}
	data, backing, _ := m.take(bufs)
	if &backing[0] != &whole[0] || len(data) != length {
		t.Fatal("the message taken is not the buffer it joined")
	}
	for i := range data {
		if data[i] != byte(i) {
			t.Fatalf("byte %d differs", i)
		}
	}
	bufs.Put(backing)
	if bufs.held != 0 {
		t.Fatalf("%d bytes never went back", bufs.held)
	}

	// A claim of the largest message with one small packet holds what
	// the packet brought.
	var c inMsg
	c.init(contract.MaxMessage, 40_000)
	p := make([]byte, pkt)
	keep, need := c.plan(p, p, false)
	if _, committed := c.store(0, p, p, keep, bufs); committed != pkt || need != 2048 || c.whole != nil {
		t.Fatalf("a 1 MB claim with %d bytes committed %d (planned %d), joined %v", pkt, committed, need, c.whole != nil)
	}
}
