package tcpecho

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

func TestEcho(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	setups := 0
	s := Serve(ln, func(*net.TCPConn) error { setups++; return nil })
	defer s.Close()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := NewReader(c)
	var buf []byte
	for _, n := range []int{0, 1, 100, 70_000, MaxMessage} {
		req := bytes.Repeat([]byte{byte(n)}, n)
		if _, err := c.Write(AppendMessage(nil, req)); err != nil {
			t.Fatal(err)
		}
		got, err := ReadMessage(r, &buf)
		if err != nil || got != n || !bytes.Equal(buf[Prefix:Prefix+got], req) {
			t.Fatalf("echo of %d bytes: %d bytes, %v", n, got, err)
		}
	}
	if s.Accepted() != 1 || setups != 1 {
		t.Fatalf("accepted %d, set up %d; want 1 and 1", s.Accepted(), setups)
	}
}

func TestSetupRefuses(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	s := Serve(ln, func(*net.TCPConn) error { return errors.New("no") })
	defer s.Close()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(AppendMessage(nil, []byte("x")))
	var buf []byte
	if _, err := ReadMessage(NewReader(c), &buf); err == nil {
		t.Fatal("a connection its setup refused was served")
	}
}

func TestReadMessageLimits(t *testing.T) {
	var buf []byte
	big := AppendMessage(nil, nil)
	big[0] = 0xff // length far above MaxMessage
	if _, err := ReadMessage(bufio.NewReader(bytes.NewReader(big)), &buf); err == nil {
		t.Fatal("oversize length accepted")
	}
	short := AppendMessage(nil, []byte("hello"))[:6]
	if _, err := ReadMessage(bufio.NewReader(bytes.NewReader(short)), &buf); err == nil {
		t.Fatal("truncated message accepted")
	}
}

func TestAppendReply(t *testing.T) {
	req := []byte("abcdef")
	tests := []struct {
		size int
		want string
	}{
		{0, "abcdef"},
		{-1, "abcdef"},
		{3, "abc"},
		{6, "abcdef"},
		{9, "abcdef\x00\x00\x00"},
	}
	for _, tt := range tests {
		dst := []byte("xx")
		dst = append(dst, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)[:2] // stale bytes past len
		if got := AppendReply(dst, req, tt.size); string(got) != "xx"+tt.want {
			t.Errorf("AppendReply(%q, %d) = %q, want %q", req, tt.size, got[2:], tt.want)
		}
	}
}

func TestReplySize(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := ServeWith(ln, Options{ReplySize: 10})
	defer s.Close()
	p, err := Dial(context.Background(), s.Addr().String(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var buf []byte
	for _, n := range []int{1, 10, 5000} {
		req := bytes.Repeat([]byte{7}, n)
		got, err := p.Call(context.Background(), req, &buf)
		if want := AppendReply(nil, req, 10); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("reply to %d bytes: %q, %v; want %q", n, got, err, want)
		}
	}
	if s.Served() != 3 {
		t.Errorf("served %d, want 3", s.Served())
	}
}

// TestPool runs more concurrent callers than the pool has connections:
// every call gets its own reply, and no more than the maximum are opened.
func TestPool(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, nil)
	defer s.Close()
	ctx := context.Background()
	p, err := Dial(ctx, s.Addr().String(), 3)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			var buf []byte
			for i := range 50 {
				req := fmt.Appendf(nil, "caller %d call %d", g, i)
				if g%2 == 0 {
					req = append(req, make([]byte, 20_000)...) // the writev path
				}
				got, err := p.Call(ctx, req, &buf)
				if err != nil || !bytes.Equal(got, req) {
					errs <- fmt.Errorf("caller %d call %d: %d bytes, %v", g, i, len(got), err)
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
	if n := p.Conns(); n > 3 || s.Accepted() > 3 {
		t.Errorf("%d connections open, %d accepted; want at most 3", n, s.Accepted())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Call(ctx, []byte("x"), new([]byte)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("call on a closed pool: %v, want net.ErrClosed", err)
	}
	if p.Conns() != 0 {
		t.Errorf("%d connections open after Close", p.Conns())
	}
}

// TestPoolContext: a call whose context ends gives up, and the pool goes
// on serving calls with other contexts.
func TestPoolContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A server that never answers: the listener's backlog accepts the
	// connection, nobody reads it.
	defer ln.Close()
	p, err := Dial(context.Background(), ln.Addr().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Call(ctx, []byte("x"), new([]byte)); err == nil {
		t.Fatal("a call to a silent server returned")
	}
	if p.Conns() != 0 {
		t.Errorf("the failed connection is still open (%d)", p.Conns())
	}
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := p.Call(done, []byte("x"), new([]byte)); !errors.Is(err, context.Canceled) {
		t.Errorf("call with an ended context: %v, want context.Canceled", err)
	}
}

func TestDialRefused(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if _, err := Dial(context.Background(), addr, 4); err == nil {
		t.Fatal("Dial to a closed port succeeded")
	}
}
