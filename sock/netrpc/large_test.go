package netrpc_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/rpc"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

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
