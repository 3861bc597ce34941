package grpcecho

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
)

// start serves o on loopback and returns a client of it.
func start(t *testing.T, o Options) (*Server, *Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, o)
	t.Cleanup(s.Close)
	c, err := Dial(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestEcho(t *testing.T) {
	s, c := start(t, Options{})
	ctx := testContext(t)
	var resp []byte
	sizes := []int{0, 1, 100, 70_000, 1_000_000}
	for _, n := range sizes {
		req := bytes.Repeat([]byte{byte(n) | 1}, n)
		got, err := c.Call(ctx, req, &resp)
		if err != nil || !bytes.Equal(got, req) {
			t.Fatalf("echo of %d bytes: %d bytes, %v", n, len(got), err)
		}
	}
	if s.Served() != int64(len(sizes)) {
		t.Errorf("served %d, want %d", s.Served(), len(sizes))
	}
}

func TestReplySize(t *testing.T) {
	_, c := start(t, Options{ReplySize: 8})
	ctx := testContext(t)
	var resp []byte
	for _, tt := range []struct{ req, want string }{
		{"0123456789", "01234567"},
		{"0123", "0123\x00\x00\x00\x00"},
		{"abcdefgh", "abcdefgh"},
	} {
		got, err := c.Call(ctx, []byte(tt.req), &resp)
		if err != nil || string(got) != tt.want {
			t.Errorf("reply to %q: %q, %v; want %q", tt.req, got, err, tt.want)
		}
	}
}

func TestConcurrentCalls(t *testing.T) {
	_, c := start(t, Options{})
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			var resp []byte
			for i := range 20 {
				req := fmt.Appendf(nil, "caller %d call %d", g, i)
				got, err := c.Call(ctx, req, &resp)
				if err != nil || !bytes.Equal(got, req) {
					errs <- fmt.Errorf("%q: got %q, %v", req, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(testContext(t), []byte("x"), new([]byte)); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
}

func TestCodec(t *testing.T) {
	var c Codec
	if _, err := c.Marshal("text"); !errors.Is(err, ErrNotBytes) {
		t.Errorf("Marshal(string): %v, want ErrNotBytes", err)
	}
	if err := c.Unmarshal(nil, new(string)); !errors.Is(err, ErrNotBytes) {
		t.Errorf("Unmarshal into *string: %v, want ErrNotBytes", err)
	}
	in := []byte("hello")
	out, err := c.Marshal(&in)
	if err != nil || string(out.Materialize()) != "hello" {
		t.Fatalf("Marshal: %q, %v", out.Materialize(), err)
	}
	got := make([]byte, 0, 64)
	data := mem.BufferSlice{mem.SliceBuffer("hel"), mem.SliceBuffer("lo!")}
	if err := c.Unmarshal(data, &got); err != nil || string(got) != "hello!" || cap(got) != 64 {
		t.Errorf("Unmarshal: %q (cap %d), %v; want \"hello!\" in the same buffer", got, cap(got), err)
	}
}
