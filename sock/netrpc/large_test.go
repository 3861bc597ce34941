package netrpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"net/rpc"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/internal/testkit/socktest"
	"github.com/homa-go/homa/sock"
	"github.com/homa-go/homa/sock/netrpc"
)

// pattern returns n bytes that differ from part to part, so that a part
// put in the wrong place shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>16)
	}
	return b
}

// Calls longer than one Homa message go through both ways, up to the
// default limit of 8 MiB, next to small calls.
func TestLargeMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		var wg sync.WaitGroup
		for _, n := range []int{999_900, 1_000_001, 2_999_960, 3_000_000, 8_000_000, netrpc.DefaultMaxMessage - 100} {
			wg.Go(func() {
				in := pattern(n)
				var out []byte
				if err := c.Call("Arith.Echo", in, &out); err != nil || !bytes.Equal(in, out) {
					t.Errorf("Echo of %d bytes: %d bytes back (equal %v), %v", n, len(out), bytes.Equal(in, out), err)
				}
				var made []byte
				if err := c.Call("Arith.Make", n, &made); err != nil || len(made) != n {
					t.Errorf("Make(%d): %d bytes, %v", n, len(made), err)
				}
			})
			wg.Go(func() {
				var r int
				if err := c.Call("Arith.Multiply", &Args{n, 2}, &r); err != nil || r != 2*n {
					t.Errorf("Multiply(%d, 2) = %d, %v", n, r, err)
				}
			})
		}
		wg.Wait()
	})
}

// A call longer than the limit fails alone, with an error that wraps
// sock.ErrMessageTooLong and names the limit and how to raise it; a
// reply longer than the server's limit fails its call with a
// ServerError saying so. Raising Config.MaxMessage at both ends lets
// them through.
func TestMessageTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := w.client(t)
		defer c.Close()
		var reply []byte
		limit := fmt.Sprint(netrpc.DefaultMaxMessage)
		err := c.Call("Arith.Echo", make([]byte, netrpc.DefaultMaxMessage), &reply)
		if !errors.Is(err, sock.ErrMessageTooLong) || !strings.Contains(err.Error(), limit) || !strings.Contains(err.Error(), "netrpc.Config.MaxMessage") {
			t.Errorf("Echo of %d bytes: %v, want sock.ErrMessageTooLong naming the limit %s and netrpc.Config.MaxMessage", netrpc.DefaultMaxMessage, err, limit)
		}
		if err != nil && strings.Contains(err.Error(), "1..1000000") {
			t.Errorf("Echo of %d bytes: %q speaks of one Homa message's limit, not the one that refused it", netrpc.DefaultMaxMessage, err)
		}
		err = c.Call("Arith.Make", netrpc.DefaultMaxMessage, &reply)
		if !isServerError(err, "reply of") || !isServerError(err, limit) {
			t.Errorf("Make(%d): %v, want a ServerError about the reply naming the limit", netrpc.DefaultMaxMessage, err)
		}
		if err := c.Call("Arith.Echo", []byte("still works"), &reply); err != nil {
			t.Errorf("Echo after the failures: %v", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		cfg := &netrpc.Config{MaxMessage: 12 << 20}
		w := newMemWorldConfig(t, cfg)
		defer w.close()
		c := rpc.NewClientWithCodec(w.codecConfig(t, serverAddr, cfg))
		defer c.Close()
		in := pattern(10 << 20)
		var out []byte
		if err := c.Call("Arith.Echo", in, &out); err != nil || !bytes.Equal(in, out) {
			t.Errorf("Echo of 10 MiB with a limit of 12 MiB: %d bytes back, %v", len(out), err)
		}
		// This client takes less than the server sends.
		small := rpc.NewClientWithCodec(w.codecConfig(t, serverAddr, &netrpc.Config{MaxMessage: 2 << 20}))
		defer small.Close()
		err := small.Call("Arith.Make", 3<<20, &out)
		if !isServerError(err, "client's limit of 2097152 bytes") {
			t.Errorf("Make(3 MiB) by a client taking 2 MiB: %v, want an error naming the client's limit", err)
		}
		if err := small.Call("Arith.Make", 1<<20, &out); err != nil || len(out) != 1<<20 {
			t.Errorf("Make(1 MiB) after it: %d bytes, %v", len(out), err)
		}
	})
}

// partFrame is a part of a large message as package netrpc encodes it
// (part.go), built here by hand as a hostile peer would.
func partFrame(kind byte, total, offset int, id uint64, data []byte) []byte {
	b := []byte{1, kind, 0, 0}
	b = binary.BigEndian.AppendUint32(b, uint32(total))
	b = binary.BigEndian.AppendUint32(b, uint32(offset))
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, data...)
}

// Kinds of parts (part.go).
const (
	kindRequestPart = 3
	kindPartAck     = 4
	kindReplyPart   = 5
	kindReplyPull   = 6
	partData        = 1_000_000 - 20
)

// A server given hostile parts of large requests refuses them with an
// error naming what is wrong, and keeps serving: a part claiming more
// than the limit, a repeated part, parts of a call claiming different
// lengths, a part at a place that does not fit, and pulls of replies
// that do not exist or belong to others.
func TestHostileParts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		cc, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		raw := cc
		defer raw.Close()
		send := func(b []byte) []byte {
			t.Helper()
			m, err := raw.Call(context.Background(), serverAddr, b)
			if err != nil {
				t.Fatal(err)
			}
			return m.Data
		}
		chunk := make([]byte, 64<<10)
		for _, c := range []struct {
			name string
			msg  []byte
			want string
		}{
			{"claim of 1 GiB", partFrame(kindRequestPart, 1<<30, 0, 1, chunk), "server's limit of 8388608 bytes"},
			{"claim of 4 GiB-1", partFrame(kindRequestPart, 1<<32-1, 0, 1, chunk), "server's limit of 8388608 bytes"},
			{"first part of 8 MiB", partFrame(kindRequestPart, 8<<20, 0, 2, chunk), ""},
			{"the same part again", partFrame(kindRequestPart, 8<<20, 0, 2, chunk), "repeats or overlaps"},
			{"the next part of the refused call", partFrame(kindRequestPart, 8<<20, 64<<10, 2, chunk), "repeats or overlaps"},
			{"a part of another call", partFrame(kindRequestPart, 8<<20, 64<<10, 3, chunk), ""},
			{"that call claiming another length", partFrame(kindRequestPart, 4<<20, 128<<10, 3, chunk), "claims 4194304 bytes"},
			{"an overlapping part", partFrame(kindRequestPart, 8<<20, 96<<10, 4, chunk), ""},
			{"", partFrame(kindRequestPart, 8<<20, 64<<10, 4, chunk), "repeats or overlaps"},
			{"a short part not at the end", partFrame(kindRequestPart, 8<<20, 0, 5, chunk[:100]), "the least is 65536"},
			{"a part past the end", partFrame(kindRequestPart, 2<<20, 2<<20-10, 6, chunk), "malformed"},
			{"a pull of a reply nobody stored", partFrame(kindReplyPull, 3<<20, partData, 77, nil), "no large reply 77"},
			{"a part of a reply", partFrame(kindReplyPart, 3<<20, 0, 77, chunk), "kind 5"},
		} {
			got := send(c.msg)
			if c.want == "" {
				if !bytes.Equal(got[:2], []byte{1, kindPartAck}) {
					t.Errorf("%s: answered %q, want an acknowledgment", c.name, got)
				}
				continue
			}
			if len(got) < 2 || got[1] != 2 || !bytes.Contains(got, []byte(c.want)) {
				t.Errorf("%s: answered %q, want an error response containing %q", c.name, got, c.want)
			}
		}
		if d := w.srv.Drops(); d != (netrpc.Drops{Malformed: 7, TooLong: 2, NoReply: 1}) || w.srv.Dropped() != 10 {
			t.Errorf("Drops = %+v, Dropped = %d; want 7 malformed, 2 too long, 1 without its reply", d, w.srv.Dropped())
		}
		// Meanwhile real large calls work.
		c := w.client(t)
		defer c.Close()
		in := pattern(3_000_000)
		var out []byte
		if err := c.Call("Arith.Echo", in, &out); err != nil || !bytes.Equal(in, out) {
			t.Errorf("Echo of 3 MB after the hostile parts: %d bytes, %v", len(out), err)
		}
	})
}

// A client given hostile replies fails the call alone with an error
// naming what is wrong, and its later calls work: a reply claiming more
// than its limit, or too little to need parts, and answers to its pulls
// of another reply, at a place it did not ask for, or of the wrong
// length.
func TestHostileReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New(memnet.Config{})
		defer nw.Close()
		sc, err := socktest.OpenMem(nw, serverAddr, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		liar := sc
		defer liar.Close()
		const total = 3 << 20
		head := partFrame(kindReplyPart, total, 0, 5, make([]byte, partData))
		var mode atomic.Int32
		go func() {
			for {
				m, err := liar.Recv(context.Background(), sock.Any)
				if err != nil {
					return
				}
				var resp []byte
				if m.Data[1] == kindReplyPull {
					off := int(binary.BigEndian.Uint32(m.Data[8:]))
					n := min(partData, total-off)
					switch mode.Load() {
					case 2: // another reply
						resp = partFrame(kindReplyPart, total, off, 6, make([]byte, n))
					case 3: // another place
						resp = partFrame(kindReplyPart, total, off+1, 5, make([]byte, n-1))
					case 4: // short
						resp = partFrame(kindReplyPart, total, off, 5, make([]byte, 64<<10))
					case 5: // a response frame: the server's error
						resp = []byte{1, 2, 0, 0, 0, 0, 0, 4, 'g', 'o', 'n', 'e'}
					}
				} else {
					switch mode.Load() {
					case 0:
						resp = partFrame(kindReplyPart, 1<<30, 0, 5, make([]byte, partData))
					case 1:
						resp = partFrame(kindReplyPart, 900_000, 0, 5, make([]byte, 900_000))
					default:
						resp = head
					}
				}
				_ = liar.Reply(m, resp)
				m.Release()
			}
		}()
		cc, err := socktest.OpenMem(nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		codec := netrpc.NewClientCodec(cc, serverAddr)
		c := rpc.NewClientWithCodec(codec)
		defer c.Close()
		for i, want := range []string{"client's limit of 8388608 bytes", "reply of 900000 bytes starts", "part of reply 6", "not asked for", "want 999980", "gone"} {
			mode.Store(int32(i))
			var out []byte
			if err := c.Call("Arith.Make", 1, &out); !isServerError(err, want) {
				t.Errorf("mode %d: %v, want an error containing %q", i, err, want)
			}
		}
	})
}

// A MaxMessage below one Homa message holds too, at both ends.
func TestSmallMaxMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorldConfig(t, &netrpc.Config{MaxMessage: 1000})
		defer w.close()
		c := rpc.NewClientWithCodec(w.codecConfig(t, serverAddr, &netrpc.Config{MaxMessage: 2000}))
		defer c.Close()
		var out []byte
		if err := c.Call("Arith.Echo", make([]byte, 3000), &out); !errors.Is(err, sock.ErrMessageTooLong) || !strings.Contains(err.Error(), "client's limit of 2000") {
			t.Errorf("Echo of 3000 bytes: %v, want the client's limit", err)
		}
		if err := c.Call("Arith.Echo", make([]byte, 1500), &out); !isServerError(err, "server's limit of 1000") {
			t.Errorf("Echo of 1500 bytes: %v, want the server's limit", err)
		}
		if err := c.Call("Arith.Make", 1500, &out); !isServerError(err, "server's limit of 1000") {
			t.Errorf("Make(1500): %v, want the server's limit", err)
		}
		if err := c.Call("Arith.Echo", make([]byte, 500), &out); err != nil || len(out) != 500 {
			t.Errorf("Echo of 500 bytes: %d back, %v", len(out), err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t)
		defer w.close()
		c := rpc.NewClientWithCodec(w.codecConfig(t, serverAddr, &netrpc.Config{MaxMessage: 2000}))
		defer c.Close()
		var out []byte
		if err := c.Call("Arith.Make", 5000, &out); !isServerError(err, "client's limit of 2000") {
			t.Errorf("Make(5000) by a client taking 2000: %v, want the client's limit", err)
		}
	})
}

// A server out of memory for large messages refuses the part that
// would go past the limit, saying so, and counts it.
func TestLargeMemoryRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorldConfig(t, &netrpc.Config{LargeMemory: 10 << 20})
		defer w.close()
		cc, err := socktest.OpenMem(w.nw, netip.AddrPortFrom(clientHost, 0), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		raw := cc
		defer raw.Close()
		chunk := make([]byte, 512<<10)
		var answers [][]byte
		// Each part is held in a buffer of 1 MiB (the socket's pool rounds
		// up to a power of two), which is what counts: two fit the
		// host's share of 2.5 MiB, the others do not.
		for id := range uint64(4) {
			m, err := raw.Call(context.Background(), serverAddr, partFrame(kindRequestPart, 8<<20, 0, id, chunk))
			if err != nil {
				t.Fatal(err)
			}
			answers = append(answers, m.Data)
		}
		for i, a := range answers[:2] {
			if a[1] != kindPartAck {
				t.Errorf("part %d: %q, want an acknowledgment", i, a)
			}
		}
		if a := answers[2]; a[1] != 2 || !bytes.Contains(a, []byte("LargeMemoryPerPeer (2621440 bytes")) {
			t.Errorf("part over the host's share: %q, want an error naming LargeMemoryPerPeer", a)
		}
		if d := w.srv.Drops(); d.Memory != 2 {
			t.Errorf("Drops = %+v, want 2 for memory", d)
		}
	})
}
