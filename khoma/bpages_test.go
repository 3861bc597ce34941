package khoma

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

func TestMessageBpages(t *testing.T) {
	for _, c := range []struct{ length, want int }{
		{0, 0}, {1, 1}, {HOMA_BPAGE_SIZE, 1}, {HOMA_BPAGE_SIZE + 1, 2},
		{15 * HOMA_BPAGE_SIZE, 15}, {HOMA_MAX_MESSAGE_LENGTH, HOMA_MAX_BPAGES},
	} {
		if got := MessageBpages(c.length); got != c.want {
			t.Errorf("MessageBpages(%d) = %d, want %d", c.length, got, c.want)
		}
	}
}

func TestGather(t *testing.T) {
	const P = HOMA_BPAGE_SIZE
	region := make([]byte, 8*P)
	for i := range region {
		region[i] = byte(i * 7)
	}
	msg := func(offsets []uint32, length int) []byte {
		var b []byte
		for i, off := range offsets {
			n := min(P, length-i*P)
			b = append(b, region[off:int(off)+n]...)
		}
		return b
	}
	for _, c := range []struct {
		name    string
		offsets []uint32
		length  int
		ok      bool
	}{
		{"empty", nil, 0, true},
		{"one byte", []uint32{5 * P}, 1, true},
		{"fragment mid-page", []uint32{3*P + 100}, 500, true},
		{"fragment at region end", []uint32{8*P - 500}, 500, true},
		{"two pages", []uint32{2 * P, 6 * P}, P + 1, true},
		{"last unaligned", []uint32{7 * P, 0, 4*P + 8}, 2*P + 9, true},
		{"out of order", []uint32{5 * P, 1 * P, 3 * P}, 3 * P, true},
		{"too few", []uint32{0}, P + 1, false},
		{"too many", []uint32{0, P}, P, false},
		{"unaligned middle", []uint32{0, P + 1, 2 * P}, 2*P + 5, false},
		{"past the region", []uint32{7*P + 1}, P, false},
		{"far past the region", []uint32{0xffffffff}, 1, false},
		{"negative length", nil, -1, false},
		{"too long", make([]uint32, 16), HOMA_MAX_MESSAGE_LENGTH + 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]byte, max(c.length, 0))
			err := Gather(dst, region, c.offsets, c.length)
			if !c.ok {
				if !errors.Is(err, ErrBadBpages) {
					t.Errorf("Gather = %v, want ErrBadBpages", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := msg(c.offsets, c.length); !bytes.Equal(dst, want) {
				t.Errorf("Gather copied the wrong bytes")
			}
		})
	}
	if err := Gather(make([]byte, 1), region, []uint32{0}, 2); err == nil {
		t.Error("Gather into a short buffer succeeded")
	}
}

func TestLedger(t *testing.T) {
	var l Ledger
	if err := l.Receive([]uint32{0, 65536, 131072 + 5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Receive(make([]uint32, HOMA_MAX_BPAGES+1)); !errors.Is(err, ErrBadBpages) {
		t.Errorf("Receive(17 bpages) = %v", err)
	}
	if err := l.Done([]uint32{0, 0}); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Done of a page twice in one call = %v", err)
	}
	if err := l.Done([]uint32{0, 7}); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Done of a page never received = %v", err)
	}
	if l.Held() != 3 || l.Queued() != 0 {
		t.Fatalf("a failed Done changed the ledger: %d held, %d queued", l.Held(), l.Queued())
	}
	if err := l.Done([]uint32{0, 65536, 131072 + 5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Done([]uint32{0}); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Done = %v", err)
	}

	var a RecvmsgArgs
	a.ID = 99
	if n := l.Fill(&a); n != 3 || a.NumBpages != 3 || a.ID != 0 || a.BpageOffsets[2] != 131072+5 {
		t.Fatalf("Fill = %d, args %+v", n, a)
	}
	l.Settle(false) // the call failed before the kernel looked
	if l.Queued() != 3 || l.Returned() != 0 {
		t.Fatalf("after a refused return: %d queued, %d returned", l.Queued(), l.Returned())
	}
	l.Fill(&a)
	l.Settle(true)
	if l.Queued() != 0 || l.Returned() != 3 {
		t.Fatalf("after a return: %d queued, %d returned", l.Queued(), l.Returned())
	}

	// More than HOMA_MAX_BPAGES go back over several calls, oldest first.
	var many []uint32
	for i := range 40 {
		many = append(many, uint32(i)<<HOMA_BPAGE_SHIFT)
	}
	for i := 0; i < len(many); i += HOMA_MAX_BPAGES {
		part := many[i:min(i+HOMA_MAX_BPAGES, len(many))]
		l.Receive(part)
		l.Done(part)
	}
	var back []uint32
	for l.Queued() > 0 {
		n := l.Fill(&a)
		if n > HOMA_MAX_BPAGES {
			t.Fatalf("Fill loaded %d bpages", n)
		}
		back = append(back, a.BpageOffsets[:n]...)
		l.Settle(true)
	}
	if !slices.Equal(back, many) {
		t.Errorf("returned %v, want %v", back, many)
	}
}

func TestTaken(t *testing.T) {
	msg := func(id uint64, num uint32) *RecvmsgArgs { return &RecvmsgArgs{ID: id, NumBpages: num} }
	for _, c := range []struct {
		name  string
		sent  int
		n     int
		errno syscall.Errno
		a     *RecvmsgArgs
		want  bool
	}{
		{"nothing sent", 0, -1, syscall.EFAULT, msg(0, 0), true},
		{"message", 3, 100, 0, msg(4, 1), true},
		{"message with as many bpages", 3, 3 * HOMA_BPAGE_SIZE, 0, msg(4, 3), true},
		{"failed RPC", 3, -1, syscall.ETIMEDOUT, msg(6, 0), true},
		{"nothing ready", 3, -1, syscall.EAGAIN, msg(0, 0), true},
		{"interrupted wait", 3, -1, syscall.EINTR, msg(0, 0), true},
		{"early failure", 3, -1, syscall.EFAULT, msg(0, 3), false},
		{"bad control length", 3, -1, syscall.EINVAL, msg(0, 3), false},
	} {
		if got := Taken(c.sent, c.n, c.errno, c.a); got != c.want {
			t.Errorf("%s: Taken = %v, want %v", c.name, got, c.want)
		}
	}
}

// kernelPool models the kernel's side of the buffer region: bpages with
// reference counts, whole pages for all but a message's last bytes,
// which may share a partly used page with earlier fragments.
type kernelPool struct {
	pages   int
	refs    []int
	free    []int
	partial int // page taking fragments, or -1
	used    int // bytes used in partial
	out     map[uint32]int
	handed  int
}

func newKernelPool(pages int) *kernelPool {
	k := &kernelPool{pages: pages, refs: make([]int, pages), partial: -1, out: map[uint32]int{}}
	for i := pages - 1; i >= 0; i-- {
		k.free = append(k.free, i)
	}
	return k
}

func (k *kernelPool) take() int {
	i := k.free[len(k.free)-1]
	k.free = k.free[:len(k.free)-1]
	k.refs[i]++
	return i
}

// alloc places a message of length bytes, or reports false when the
// pool is too full.
func (k *kernelPool) alloc(length int) ([]uint32, bool) {
	n := MessageBpages(length)
	if len(k.free) < n {
		return nil, false
	}
	var offs []uint32
	for j := range n {
		last := j == n-1
		size := min(HOMA_BPAGE_SIZE, length-j*HOMA_BPAGE_SIZE)
		switch {
		case last && size < HOMA_BPAGE_SIZE && k.partial >= 0 && k.used+size <= HOMA_BPAGE_SIZE:
			k.refs[k.partial]++
			offs = append(offs, uint32(k.partial*HOMA_BPAGE_SIZE+k.used))
			k.used += size
		case last && size < HOMA_BPAGE_SIZE:
			i := k.take()
			k.refs[i]++ // the pool's own hold while it fills the page
			if k.partial >= 0 {
				k.unref(k.partial)
			}
			k.partial, k.used = i, size
			offs = append(offs, uint32(i*HOMA_BPAGE_SIZE))
		default:
			offs = append(offs, uint32(k.take()*HOMA_BPAGE_SIZE))
		}
	}
	for _, o := range offs {
		k.out[o]++
	}
	k.handed += len(offs)
	return offs, true
}

func (k *kernelPool) unref(i int) {
	if k.refs[i]--; k.refs[i] == 0 {
		k.free = append(k.free, i)
	}
}

// release takes bpages back as recvmsg does, failing on one that is not
// out.
func (k *kernelPool) release(t *rapid.T, offs []uint32) {
	for _, o := range offs {
		if k.out[o] == 0 {
			t.Fatalf("bpage offset %#x returned but not handed out (or returned twice)", o)
		}
		if k.out[o]--; k.out[o] == 0 {
			delete(k.out, o)
		}
		k.unref(int(o >> HOMA_BPAGE_SHIFT))
	}
}

func (k *kernelPool) outstanding() int {
	n := 0
	for _, c := range k.out {
		n += c
	}
	return n
}

// source is the content messages are cut from: message s of length n is
// source[s : s+n].
var source = func() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 2*HOMA_MAX_MESSAGE_LENGTH)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

type heldMsg struct {
	offs []uint32
}

// TestLedgerProperties runs random sequences of message arrivals,
// application releases and recvmsg calls (some refused before the kernel
// takes anything) against a model of the kernel's pool: no bpage goes
// back twice, no call carries more than HOMA_MAX_BPAGES, the bytes read
// from the offsets are the message, and in the end every bpage is back.
func TestLedgerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pages := rapid.IntRange(HOMA_MAX_BPAGES, 64).Draw(t, "pages")
		k := newKernelPool(pages)
		region := make([]byte, pages*HOMA_BPAGE_SIZE)
		var (
			l    Ledger
			held []heldMsg
			a    RecvmsgArgs
		)
		recv := func(t *rapid.T, refuse bool) {
			queued := l.Queued()
			sent := l.Fill(&a)
			if sent != min(queued, HOMA_MAX_BPAGES) || int(a.NumBpages) != sent {
				t.Fatalf("Fill loaded %d (NumBpages %d) of %d queued", sent, a.NumBpages, queued)
			}
			if refuse {
				l.Settle(Taken(sent, -1, syscall.EFAULT, &a))
				return
			}
			k.release(t, a.BpageOffsets[:a.NumBpages])
			a.NumBpages = 0
			l.Settle(Taken(sent, -1, syscall.EAGAIN, &a))
		}
		t.Repeat(map[string]func(*rapid.T){
			"arrive": func(t *rapid.T) {
				length := rapid.OneOf(rapid.IntRange(0, 3*HOMA_BPAGE_SIZE), rapid.IntRange(0, HOMA_MAX_MESSAGE_LENGTH)).Draw(t, "length")
				start := rapid.IntRange(0, HOMA_MAX_MESSAGE_LENGTH).Draw(t, "start")
				offs, ok := k.alloc(length)
				if !ok {
					t.Skip("pool full")
				}
				want := source[start : start+length]
				for j, o := range offs {
					copy(region[o:], want[j*HOMA_BPAGE_SIZE:min(length, (j+1)*HOMA_BPAGE_SIZE)])
				}
				if err := l.Receive(offs); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, length)
				if err := Gather(got, region, offs, length); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("message of %d bytes at %v reassembled wrong", length, offs)
				}
				held = append(held, heldMsg{offs})
			},
			"finish": func(t *rapid.T) {
				if len(held) == 0 {
					t.Skip("nothing held")
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "msg")
				if err := l.Done(held[i].offs); err != nil {
					t.Fatal(err)
				}
				held = slices.Delete(held, i, i+1)
			},
			"recvmsg": func(t *rapid.T) {
				recv(t, rapid.Bool().Draw(t, "refused"))
			},
			"": func(t *rapid.T) {
				if out := k.outstanding(); out != l.Held()+l.Queued() {
					t.Fatalf("kernel misses %d bpages; ledger holds %d and queues %d", out, l.Held(), l.Queued())
				}
			},
		})
		for _, m := range held {
			if err := l.Done(m.offs); err != nil {
				t.Fatal(err)
			}
		}
		for l.Queued() > 0 {
			recv(t, false)
		}
		if out := k.outstanding(); out != 0 {
			t.Fatalf("%d bpages never returned", out)
		}
		if l.Returned() != uint64(k.handed) {
			t.Fatalf("returned %d bpages, %d handed out", l.Returned(), k.handed)
		}
	})
}
