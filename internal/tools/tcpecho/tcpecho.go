// Package tcpecho is the Go TCP baseline Homa is measured against: an
// echo server for length-prefixed messages, written the way Go services
// frame messages on a connection, the framing itself, and a client that
// shares a pool of connections among goroutines (pool.go). Each message
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

// AppendReply appends to dst the reply to req for a server whose replies
// are size bytes: the first size bytes of req, zero-padded when req is
// shorter. A size of 0 or less means the whole request.
func AppendReply(dst, req []byte, size int) []byte {
	if size <= 0 {
		return append(dst, req...)
	}
	n := min(size, len(req))
	dst = append(dst, req[:n]...)
	pad := size - n
	dst = slices.Grow(dst, pad)
	clear(dst[len(dst) : len(dst)+pad])
	return dst[:len(dst)+pad]
}

// Options configures a Server.
type Options struct {
	// Setup, if not nil, prepares each accepted connection (a connection
	// it fails is closed).
	Setup func(*net.TCPConn) error
	// ReplySize, when positive, makes every reply ReplySize bytes long
	// (see AppendReply); otherwise the reply is the request itself.
	ReplySize int
}

// Server answers every message on every connection, one goroutine per
// connection: with the message itself, or with Options.ReplySize bytes.
type Server struct {
	ln       net.Listener
	opts     Options
	accepted atomic.Int64
	served   atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{} // open connections, closed by Close
}

// Serve starts an echo server on ln, which the Server owns from now on.
// setup, if not nil, prepares each accepted connection (a connection it
// fails is closed).
func Serve(ln net.Listener, setup func(*net.TCPConn) error) *Server {
	return ServeWith(ln, Options{Setup: setup})
}

// ServeWith starts a server configured by o on ln, which the Server owns
// from now on.
func ServeWith(ln net.Listener, o Options) *Server {
	s := &Server{ln: ln, opts: o, conns: make(map[net.Conn]struct{})}
	s.wg.Go(s.accept)
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Accepted counts the connections accepted so far.
func (s *Server) Accepted() int64 { return s.accepted.Load() }

// Served counts the messages answered so far.
func (s *Server) Served() int64 { return s.served.Load() }

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.accepted.Add(1)
		if tc, ok := c.(*net.TCPConn); ok && s.opts.Setup != nil && s.opts.Setup(tc) != nil {
			c.Close()
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			s.answer(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		})
	}
}

// answer answers the messages of one connection until it fails or
// closes. An echo goes back from the buffer it was read into, prefix
// included, in one write.
func (s *Server) answer(c net.Conn) {
	r := NewReader(c)
	buf := make([]byte, Prefix+bufferSize)
	var reply []byte
	for {
		n, err := ReadMessage(r, &buf)
		if err != nil {
			return
		}
		out := buf[:Prefix+n]
		if s.opts.ReplySize > 0 {
			reply = binary.BigEndian.AppendUint32(reply[:0], uint32(s.opts.ReplySize))
			reply = AppendReply(reply, buf[Prefix:Prefix+n], s.opts.ReplySize)
			out = reply
		}
		// Counted before the write, so that a client holding its reply
		// sees it counted; a failed write takes it back.
		s.served.Add(1)
		if _, err := c.Write(out); err != nil {
			s.served.Add(-1)
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
