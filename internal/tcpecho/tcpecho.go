// Package tcpecho is the Go TCP baseline Homa is measured against: an
// echo server for length-prefixed messages, written the way Go services
// frame messages on a connection, and the framing itself. Each message
// is a 4-byte big-endian length and the payload.
package tcpecho

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
)

const (
	// Prefix is the length of the header in front of every message.
	Prefix = 4
	// MaxMessage bounds the messages ReadMessage accepts.
	MaxMessage = 1 << 20
	// bufferSize is the read buffer of each connection.
	bufferSize = 64 << 10
)

// AppendMessage appends payload, framed, to b.
func AppendMessage(b, payload []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// ReadMessage reads one message into *buf, growing it only when it is too
// small, and returns the payload length: the payload is (*buf)[Prefix:
// Prefix+n]. The prefix stays in front, so the message can be written
// back in one call.
func ReadMessage(r *bufio.Reader, buf *[]byte) (int, error) {
	b := slices.Grow((*buf)[:0], Prefix)[:Prefix]
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint32(b))
	if n > MaxMessage {
		return 0, fmt.Errorf("tcpecho: message of %d bytes", n)
	}
	b = slices.Grow(b, n)[:Prefix+n]
	*buf = b
	_, err := io.ReadFull(r, b[Prefix:])
	return n, err
}

// NewReader is a reader sized for the messages of a connection.
func NewReader(c net.Conn) *bufio.Reader { return bufio.NewReaderSize(c, bufferSize) }

// Server answers every message on every connection with the message
// itself, one goroutine per connection.
type Server struct {
	ln       net.Listener
	setup    func(*net.TCPConn) error
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{} // open connections, closed by Close
}

// Serve starts serving on ln, which the Server owns from now on. setup,
// if not nil, prepares each accepted connection (a connection it fails is
// closed).
func Serve(ln net.Listener, setup func(*net.TCPConn) error) *Server {
	s := &Server{ln: ln, setup: setup, conns: make(map[net.Conn]struct{})}
	s.wg.Go(s.accept)
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Accepted counts the connections accepted so far.
func (s *Server) Accepted() int64 { return s.accepted.Load() }

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.accepted.Add(1)
		if tc, ok := c.(*net.TCPConn); ok && s.setup != nil && s.setup(tc) != nil {
			c.Close()
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			echo(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		})
	}
}

// echo answers the messages of one connection until it fails or closes.
func echo(c net.Conn) {
	r := NewReader(c)
	buf := make([]byte, Prefix+bufferSize)
	for {
		n, err := ReadMessage(r, &buf)
		if err != nil {
			return
		}
		if _, err := c.Write(buf[:Prefix+n]); err != nil {
			return
		}
	}
}

// Close stops the server, closes its connections and waits for their
// goroutines.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
