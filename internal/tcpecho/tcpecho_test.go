package tcpecho

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"testing"
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
