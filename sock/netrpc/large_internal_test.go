package netrpc

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/sock"
)

var (
	peerA = netip.MustParseAddrPort("10.0.0.2:40000")
	peerB = netip.MustParseAddrPort("10.0.0.3:40000")
	local = netip.MustParseAddrPort("10.0.0.1:4000")
)

// testMessage returns n bytes that differ from place to place.
func testMessage(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + i>>12)
	}
	return b
}

// partMsg is the Homa message of the request part of call id from peer
// holding msg[off:off+n].
func partMsg(peer netip.AddrPort, id uint64, msg []byte, total, off, n int) (*sock.Message, part) {
	b := appendPart(make([]byte, 0, partLen(n)), part{kind: kindRequestPart, total: total, offset: off, id: id, data: msg[off : off+n]})
	p, err := parsePart(b, kindRequestPart)
	if err != nil {
		panic(err)
	}
	return &sock.Message{ID: 1, Peer: peer, Data: b}, p
}

// The assembler puts parts arriving in any order together, counts what
// it holds, which follows what arrived and never the claimed total, and
// refuses parts that overlap what it has.
func TestAssembler(t *testing.T) {
	const total = 5*partData + 1234
	msg := testMessage(total)
	offsets := []int{0, partData, 2 * partData, 3 * partData, 4 * partData, 5 * partData}
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {2, 0, 5, 1, 4, 3}} {
		a := &assembler{total: total}
		for k, i := range order {
			off := offsets[i]
			n := min(partData, total-off)
			m, p := partMsg(peerA, 1, msg, total, off, n)
			before := a.cost()
			grow, err := a.check(p.offset, len(p.data), cap(m.Data))
			if err != nil {
				t.Fatalf("order %v: part at %d: %v", order, off, err)
			}
			a.add(p.offset, p.data, m)
			if a.cost() != before+grow {
				t.Errorf("order %v: cost went from %d to %d, check said +%d", order, before, a.cost(), grow)
			}
			if a.cost() != a.have+(k+1)*(heldCost+partHeaderLen) {
				t.Errorf("order %v: cost %d for %d bytes arrived", order, a.cost(), a.have)
			}
			if _, err := a.check(p.offset, len(p.data), cap(m.Data)); err == nil {
				t.Errorf("order %v: the part at %d again was accepted", order, off)
			}
			if _, err := a.check(p.offset+1, 10, 10); err == nil {
				t.Errorf("order %v: a part inside the one at %d was accepted", order, off)
			}
		}
		in := assembled(a)
		if len(in.rest) != 5 {
			t.Errorf("order %v: %d pieces after the first, want 5", order, len(in.rest))
		}
		in.join()
		if !a.complete() || !bytes.Equal(in.first, msg) {
			t.Errorf("order %v: complete %v, equal %v", order, a.complete(), bytes.Equal(in.first, msg))
		}
	}
	// A claim of 8 MiB with 64 KiB of it holds the 64 KiB.
	a := &assembler{total: 8 << 20}
	m, p := partMsg(peerA, 1, testMessage(minPartData), 8<<20, 0, minPartData)
	a.add(p.offset, p.data, m)
	if want := partLen(minPartData) + heldCost; a.cost() != want {
		t.Errorf("64 KiB of a message claiming 8 MiB cost %d, want %d", a.cost(), want)
	}
	for _, bad := range [][2]int{{-1, 10}, {8 << 20, 1}, {8<<20 - 5, 10}, {100, 0}, {100, 10}} {
		if _, err := a.check(bad[0], bad[1], bad[1]); !errors.Is(err, errMalformed) {
			t.Errorf("part of %d bytes at %d: %v, want errMalformed", bad[1], bad[0], err)
		}
	}
}

// testServer is a store with small limits.
func testServer() *largeServer {
	cfg := (&Config{MaxMessage: 4 << 20, LargeMemory: 6 << 20, LargeMemoryPerPeer: 3 << 20, LargeTimeout: time.Second}).withDefaults()
	return newLargeServer(&cfg, local)
}

// take gives the store part off of call id of msg (a message of total
// bytes) from peer.
func take(l *largeServer, now time.Time, peer netip.AddrPort, id uint64, msg []byte, total, off int) (partResult, []byte, int, error) {
	n := min(partData, total-off, len(msg)-off)
	m, p := partMsg(peer, id, msg, total, off, n)
	res, done, cost, err := l.takePart(m, p, now, false)
	if done == nil {
		return res, nil, cost, err
	}
	in := assembled(done)
	in.join()
	return res, in.first, cost, err
}

// A server's store of large requests: a claim costs what arrived, a
// part breaking the rules refuses its call, calls of different ids or
// peers never mix, the limits hold per peer, and what is left behind
// expires.
func TestLargeServerRequests(t *testing.T) {
	now := time.Unix(1000, 0)
	l := testServer()
	msg := testMessage(3 * partData)

	// A claim of 4 MiB with 64 KiB sent holds 64 KiB.
	if res, _, _, err := take(l, now, peerA, 1, msg[:minPartData], 4<<20, 0); res != partHeld || err != nil {
		t.Fatalf("first part: %v, %v", res, err)
	}
	if want := entryCost + partLen(minPartData) + heldCost; l.used != want {
		t.Errorf("a 64 KiB part claiming 4 MiB holds %d, want %d", l.used, want)
	}
	// Beyond the limit: refused at once, nothing held.
	res, _, _, err := take(l, now, peerA, 2, msg, 5<<20, 0)
	if res != partRefused || !errors.Is(err, sock.ErrMessageTooLong) || !strings.Contains(err.Error(), "4194304") {
		t.Errorf("part of a request of 5 MiB: %v, %v, want refused naming the limit", res, err)
	}
	if _, ok := l.calls[partKey{peerA, 2}]; ok {
		t.Errorf("a refused claim left an entry")
	}

	// The same call claiming another length, a repeated part and an
	// overlapping one refuse the call, and free what it held.
	for i, bad := range []struct{ total, off int }{{3 * partData, minPartData}, {4 << 20, 0}, {4 << 20, minPartData / 2}} {
		id := uint64(10 + i)
		if _, _, _, err := take(l, now, peerA, id, msg, 4<<20, 0); err != nil {
			t.Fatal(err)
		}
		used := l.used
		res, _, _, err := take(l, now, peerA, id, msg, bad.total, bad.off)
		if res != partRefused || !errors.Is(err, errMalformed) {
			t.Errorf("bad part %+v: %v, %v, want refused as malformed", bad, res, err)
		}
		if want := used - partLen(partData) - heldCost; l.used != want {
			t.Errorf("bad part %+v: %d held, want %d", bad, l.used, want)
		}
		if res, _, _, err := take(l, now, peerA, id, msg, 4<<20, 2*partData); res != partRefused || err == nil {
			t.Errorf("part after a bad one: %v, %v, want refused", res, err)
		}
	}

	// Parts of the same id from another peer, and of another id, are
	// other calls: each completes with its own bytes.
	other := testMessage(2*partData + 7)
	for i := range other {
		other[i] ^= 0xff
	}
	for _, c := range []struct {
		peer netip.AddrPort
		id   uint64
		msg  []byte
	}{{peerB, 20, msg}, {peerA, 20, other}} {
		_, _, _, err := take(l, now, c.peer, c.id, c.msg, len(c.msg), partData)
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		peer netip.AddrPort
		msg  []byte
	}{{peerA, other}, {peerB, msg}} {
		var res partResult
		var got []byte
		var cost int
		for _, off := range []int{0, 2 * partData} {
			if res, got, cost, err = take(l, now, c.peer, 20, c.msg, len(c.msg), off); err != nil {
				t.Fatal(err)
			}
		}
		if res != partComplete || !bytes.Equal(got, c.msg) {
			t.Errorf("call 20 of %v: %v, equal %v", c.peer, res, bytes.Equal(got, c.msg))
		}
		l.release(c.peer.Addr(), cost)
	}

	// The per-peer share: peer A cannot go past 3 MiB, peer B still can.
	for id := uint64(30); ; id++ {
		_, _, _, err := take(l, now, peerA, id, msg, 4<<20, 0)
		if err != nil {
			if !strings.Contains(err.Error(), "LargeMemoryPerPeer (3145728 bytes") {
				t.Errorf("peer over its share: %v, want an error naming LargeMemoryPerPeer", err)
			}
			break
		}
		if l.byPeer[peerA.Addr()] > 3<<20 {
			t.Fatalf("peer A holds %d, over its share", l.byPeer[peerA.Addr()])
		}
	}
	if _, _, _, err := take(l, now, peerB, 40, msg, 4<<20, 0); err != nil {
		t.Errorf("peer B while peer A is at its share: %v", err)
	}

	// Calls that never complete expire.
	later := now.Add(2 * time.Second)
	l.mu.Lock()
	l.maybeSweep(later)
	l.mu.Unlock()
	if l.used != 0 || len(l.calls) != 0 || len(l.byPeer) != 0 {
		t.Errorf("after the timeout: %d bytes, %d calls, %d peers held", l.used, len(l.calls), len(l.byPeer))
	}
}

// replyParts builds data as a message of parts, as WriteResponse does,
// and returns the parts after the first.
func replyParts(t *testing.T, data []byte) [][]byte {
	t.Helper()
	o := newOutMsg(MaxMessageLimit)
	o.Write(data)
	if o.n != len(data) || len(o.parts) != (len(data)+partData-1)/partData {
		t.Fatalf("a message of %d bytes: %d counted, %d parts", len(data), o.n, len(o.parts))
	}
	for i, p := range o.parts {
		if !bytes.Equal(p[partHeaderLen:], data[i*partData:min((i+1)*partData, len(data))]) {
			t.Fatalf("part %d of %d bytes does not hold bytes %d.. of the message", i, len(p), i*partData)
		}
	}
	return o.parts[1:]
}

// A server's store of large replies: only their peer may pull them,
// each part once, where parts begin and with the right length; pulled
// to the end they are dropped, and unpulled they expire.
func TestLargeServerReplies(t *testing.T) {
	now := time.Unix(1000, 0)
	l := testServer()
	data := testMessage(2*partData + 99)
	id, err := l.storeReply(peerA, replyParts(t, data), len(data), now)
	if err != nil {
		t.Fatal(err)
	}
	pull := func(peer netip.AddrPort, id uint64, total, off int) ([]byte, error) {
		return l.pull(peer, part{kind: kindReplyPull, total: total, offset: off, id: id}, now)
	}
	if _, err := pull(peerB, id, len(data), partData); err == nil {
		t.Errorf("another peer pulled the reply")
	}
	if _, err := pull(peerA, id+1, len(data), partData); err == nil {
		t.Errorf("a pull of another id was answered")
	}
	for _, off := range []int{0, partData + 1, 3 * partData} {
		if _, err := pull(peerA, id, len(data), off); !errors.Is(err, errMalformed) {
			t.Errorf("a pull at %d: %v, want errMalformed", off, err)
		}
	}
	if _, err := pull(peerA, id, len(data)+1, partData); !errors.Is(err, errMalformed) {
		t.Errorf("a pull claiming another length: %v, want errMalformed", err)
	}
	b, err := pull(peerA, id, len(data), partData)
	if err != nil || !bytes.Equal(b[partHeaderLen:], data[partData:2*partData]) {
		t.Fatalf("pull at %d: %d bytes, %v", partData, len(b), err)
	}
	if _, err := pull(peerA, id, len(data), partData); !errors.Is(err, errMalformed) {
		t.Errorf("the same pull again: %v, want errMalformed", err)
	}
	b, err = pull(peerA, id, len(data), 2*partData)
	if err != nil || !bytes.Equal(b[partHeaderLen:], data[2*partData:]) {
		t.Fatalf("pull at %d: %d bytes, %v", 2*partData, len(b), err)
	}
	if l.used != 0 || len(l.replies) != 0 {
		t.Errorf("after the last pull: %d bytes, %d replies held", l.used, len(l.replies))
	}
	if _, err := l.storeReply(peerA, replyParts(t, data), len(data), now); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3<<20)
	if _, err := l.storeReply(peerA, replyParts(t, big), len(big), now); err == nil {
		t.Errorf("a reply over the peer's share was stored")
	}
	if n := l.replyCount(now.Add(2 * time.Second)); n != 0 || l.used != 0 {
		t.Errorf("after the timeout: %d replies, %d bytes held", n, l.used)
	}
}
