package netio

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/wire"
)

// TestLandAt checks that a landing read splits a DATA packet where its
// payload starts.
func TestLandAt(t *testing.T) {
	if LandAt != wire.DataLen {
		t.Fatalf("LandAt = %d, want wire.DataLen = %d", LandAt, wire.DataLen)
	}
}

// wantLanded is the rule of Packet.Land, restated: how many bytes of a
// datagram of size bytes a read into p puts in Land.
func wantLanded(p *Packet, size int) int {
	if len(p.Land) == 0 || len(p.Buf) <= LandAt || size <= LandAt {
		return 0
	}
	return min(size-LandAt, len(p.Land))
}

// landLen is the Land the landing tests offer: shorter than the larger
// packets, so that they go on into Buf[LandAt:].
const landLen = 300

// landSizes are the packet sizes the landing tests send, up to max: the
// bare common header, around LandAt, around LandAt+landLen, and larger.
func landSizes(max int) []int {
	return []int{homaHeaderLen, LandAt - 1, LandAt, LandAt + 1, LandAt + landLen - 1,
		LandAt + landLen, LandAt + landLen + 1, 1500, max / 2, max}
}

// checkLanded fails unless p holds the packet want, from addr, landed as
// the rule says.
func checkLanded(t testing.TB, what string, p *Packet, want []byte, addr netip.Addr) {
	t.Helper()
	landed := wantLanded(p, len(want))
	if p.Landed != landed || p.N != len(want)-landed {
		t.Fatalf("%s: N %d, Landed %d (Land of %d); want %d, %d for a packet of %d bytes",
			what, p.N, p.Landed, len(p.Land), len(want)-landed, landed, len(want))
	}
	got := p.Bytes()
	if landed > 0 {
		got = slices.Concat(p.Buf[:LandAt], p.Land[:landed], p.Buf[LandAt:p.N])
	}
	if !bytes.Equal(got, want) || p.Addr != addr || p.Unreachable != NotUnreachable {
		t.Fatalf("%s: %d bytes (tag %#x) from %v (%v), want the %d bytes (tag %#x) sent from %v",
			what, len(got), tagOf(got), p.Addr, p.Unreachable, len(want), tagOf(want), addr)
	}
}

// readInto fills pkts, in order, with packets read from c: each
// ReadBatch gets the Packets not yet filled. It fails the test on an
// error or when they do not come within safetyTimeout.
func readInto(t testing.TB, c Conn, pkts []Packet) {
	t.Helper()
	done := make(chan error, 1)
	got := 0
	go func() {
		for got < len(pkts) {
			k, err := c.ReadBatch(pkts[got:])
			if err != nil {
				done <- err
				return
			}
			got += k
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReadBatch after %d of %d packets: %v", got, len(pkts), err)
		}
	case <-time.After(safetyTimeout):
		c.Close()
		<-done
		t.Fatalf("only %d of %d packets arrived (safety timeout)", got, len(pkts))
	}
}

// testLanding sends packets of landSizes from a to b at addr and reads
// them three times over into the same Packets: with Land on every one,
// on every other one, and on none, so that the Packets that landed
// before are read into without Land.
func testLanding(t *testing.T, a, b Conn, addr netip.Addr) {
	if l, ok := b.(Lander); !ok || !l.Lands() {
		t.Fatalf("%T does not land", b)
	}
	sizes := landSizes(a.MaxPacket(addr))
	pkts := makePackets(len(sizes), 1<<16)
	lands := make([][]byte, len(sizes))
	for i := range lands {
		lands[i] = make([]byte, landLen)
	}
	for round, every := range []int{1, 2, 0} {
		stale := 0 // Packets that landed last round and have no Land now
		for i := range pkts {
			pkts[i].Land = nil
			if every > 0 && i%every == 0 {
				pkts[i].Land = lands[i]
			} else if pkts[i].Landed > 0 {
				stale++
			}
		}
		if round > 0 && stale == 0 {
			t.Fatalf("round %d: no Packet without Land landed in the round before", round)
		}
		sent := make([][]byte, len(sizes))
		for i, size := range sizes {
			sent[i] = testPacket(a.Port(), b.Port(), size, uint64(round<<8+i))
		}
		writeAll(t, a, addr, 0, sent...)
		readInto(t, b, pkts)
		for i := range pkts {
			checkLanded(t, fmt.Sprintf("round %d packet %d", round, i), &pkts[i], sent[i], a.LocalAddr())
		}
	}
	// A packet larger than its Buf fits with its Land, and only then.
	p := []Packet{{Buf: make([]byte, 2000), Land: lands[0]}}
	big := testPacket(a.Port(), b.Port(), 2000+landLen, 0xb16)
	writeAll(t, a, addr, 0, big)
	readInto(t, b, p)
	checkLanded(t, "packet filling Buf and Land", &p[0], big, a.LocalAddr())
	p[0].Land = nil
	small := testPacket(a.Port(), b.Port(), 100, 0x5a)
	discarded := b.(StatsConn).Stats().Discarded
	writeAll(t, a, addr, 0, big, small)
	readInto(t, b, p)
	checkLanded(t, "packet after one too large without its Land", &p[0], small, a.LocalAddr())
	if d := b.(StatsConn).Stats().Discarded - discarded; d != 1 {
		t.Errorf("%d packets discarded, want the one too large for Buf without Land", d)
	}
	// Borrowed reads land nothing.
	sent := testPacket(a.Port(), b.Port(), 1000, 0xb0)
	writeAll(t, a, addr, 0, sent)
	p = []Packet{{Buf: make([]byte, 1<<16), Land: lands[0], Landed: 7}}
	for tries := 0; ; tries++ {
		k, err := b.(BorrowReader).TryReadBorrowed(p)
		if err != nil || tries > 1e6 {
			t.Fatalf("TryReadBorrowed = %d, %v after %d tries", k, err, tries)
		}
		if k == 1 {
			break
		}
	}
	p[0].Land = nil // the rule for a packet without Land: Landed 0, whole in Buf
	checkLanded(t, "borrowed packet", &p[0], sent, a.LocalAddr())
}

// TestScatter checks how a datagram is copied into a Packet with Land,
// and how gather puts it back together in Buf.
func TestScatter(t *testing.T) {
	for _, tc := range []struct {
		name            string
		buf, land, size int
		ok              bool
		wantN, wantLand int
		gathers         bool // the whole datagram fits in Buf
	}{
		{"shorter than LandAt", 100, 50, LandAt - 1, true, LandAt - 1, 0, true},
		{"exactly LandAt", 100, 50, LandAt, true, LandAt, 0, true},
		{"LandAt+1", 100, 50, LandAt + 1, true, LandAt, 1, true},
		{"fills Land", 100, 50, LandAt + 50, true, LandAt, 50, false},
		{"fills Land, gathers", 200, 50, LandAt + 50, true, LandAt, 50, true},
		{"overflows into Buf", 100, 50, LandAt + 80, true, LandAt + 30, 50, false},
		{"overflows into Buf, gathers", 200, 50, 150, true, 100, 50, true},
		{"fills Buf and Land", 100, 50, 150, true, 100, 50, false},
		{"Land longer than payload", 100, 500, 300, true, LandAt, 244, false},
		{"Buf too small", 100, 50, 151, false, 0, 0, false},
		{"Buf too small, Land long", 55, 500, 100, false, 0, 0, false},
		{"Buf of LandAt", LandAt, 50, LandAt, true, LandAt, 0, true},
		{"Buf of LandAt, larger datagram", LandAt, 50, LandAt + 1, false, 0, 0, false},
		{"no Land", 100, 0, 100, true, 100, 0, true},
		{"no Land, too large", 100, 0, 101, false, 0, 0, false},
		{"empty", 100, 50, 0, true, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testPacket(1, 2, max(tc.size, 4), 0x5c)[:tc.size]
			p := Packet{Buf: bytes.Repeat([]byte{0xee}, tc.buf), Land: bytes.Repeat([]byte{0xee}, tc.land), N: -1, Landed: -1}
			if ok := p.Scatter(d); ok != tc.ok {
				t.Fatalf("Scatter of %d bytes into Buf %d, Land %d = %v, want %v", tc.size, tc.buf, tc.land, ok, tc.ok)
			}
			if !tc.ok {
				if p.N != -1 || p.Landed != -1 {
					t.Errorf("a failed Scatter set N %d, Landed %d", p.N, p.Landed)
				}
				return
			}
			if p.N != tc.wantN || p.Landed != tc.wantLand || p.Landed != wantLanded(&p, tc.size) {
				t.Fatalf("N %d, Landed %d; want %d, %d", p.N, p.Landed, tc.wantN, tc.wantLand)
			}
			p.Addr = hostA
			checkLanded(t, "scattered", &p, d, hostA)
			if slices.ContainsFunc(p.Land[p.Landed:], func(b byte) bool { return b != 0xee }) ||
				slices.ContainsFunc(p.Buf[p.N:], func(b byte) bool { return b != 0xee }) {
				t.Error("Scatter wrote beyond Land[:Landed] or Buf[:N]")
			}
			landed := p.Landed
			if ok := p.gather(); ok != tc.gathers {
				t.Fatalf("gather = %v, want %v", ok, tc.gathers)
			}
			if tc.gathers && (p.Landed != 0 || !bytes.Equal(p.Bytes(), d)) {
				t.Errorf("gathered: N %d, Landed %d, want the %d bytes whole in Buf", p.N, p.Landed, len(d))
			}
			if !tc.gathers && (p.Landed != landed || p.N != tc.wantN) {
				t.Errorf("a failed gather changed N, Landed to %d, %d", p.N, p.Landed)
			}
		})
	}
}
