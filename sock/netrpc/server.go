package netrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"sync"
	"sync/atomic"

	"github.com/homa-go/homa/sock"
)

// ServerCodec is an rpc.ServerCodec that reads calls from the requests
// arriving at a Homa server socket and answers each with its RPC's
// response. It owns the socket: Close closes it.
//
// rpc.Server calls ReadRequestHeader and ReadRequestBody in pairs from
// one goroutine, and WriteResponse from the goroutines running the
// calls. The codec numbers the requests it reads (rpc.Request.Seq) and
// keeps each request's message under that number until WriteResponse
// answers it.
type ServerCodec struct {
	s *sock.Socket

	ctx    context.Context // ends when Close is called
	cancel context.CancelFunc
	closed atomic.Bool
	once   sync.Once
	err    error // from closing the socket

	enc encoders

	// The reading goroutine's own: the last number given out, its
	// decoders, and the request between ReadRequestHeader and
	// ReadRequestBody.
	seq  uint64
	dec  decoders
	cur  *sock.Message
	body []byte

	pendingMu sync.Mutex
	pending   map[uint64]*sock.Message // seq -> request awaiting its response

	dropped atomic.Uint64
}

var _ rpc.ServerCodec = (*ServerCodec)(nil)

// NewServerCodec returns a codec serving the requests that arrive at the
// server socket s, which it owns from now on.
func NewServerCodec(s *sock.Socket) *ServerCodec {
	ctx, cancel := context.WithCancel(context.Background())
	return &ServerCodec{s: s, ctx: ctx, cancel: cancel, pending: make(map[uint64]*sock.Message)}
}

// Serve serves the calls arriving at the server socket s with server
// (rpc.DefaultServer when nil) until s or the codec is closed; it owns s
// from now on. Like rpc.Server.ServeConn it blocks, runs each call in a
// goroutine of its own, and returns once every call it started has
// answered. Close the socket to stop it.
func Serve(server *rpc.Server, s *sock.Socket) {
	if server == nil {
		server = rpc.DefaultServer
	}
	server.ServeCodec(NewServerCodec(s))
}

// ReadRequestHeader waits for the next request. A request that is not a
// valid frame is answered at once with an error and counted (Dropped);
// net/rpc never sees it. After Close, or when the socket closes, it
// returns io.EOF, which ends rpc.Server.ServeCodec.
func (c *ServerCodec) ReadRequestHeader(r *rpc.Request) error {
	for {
		m, err := c.s.Recv(c.ctx, sock.Any)
		if err != nil {
			if c.closed.Load() || errors.Is(err, sock.ErrClosed) {
				return io.EOF
			}
			return fmt.Errorf("netrpc: receive: %w", err)
		}
		if !m.IsRequest() {
			// Only a socket that also sent requests gets responses.
			c.dropped.Add(1)
			m.Release()
			continue
		}
		method, body, err := parseRequest(m.Data)
		if err != nil {
			c.dropped.Add(1)
			_ = c.s.Reply(m, appendResponse(nil, "", err.Error()))
			m.Release()
			continue
		}
		c.seq++
		r.Seq = c.seq
		r.ServiceMethod = string(method)
		c.cur, c.body = m, body
		c.pendingMu.Lock()
		c.pending[c.seq] = m
		c.pendingMu.Unlock()
		return nil
	}
}

// ReadRequestBody decodes the arguments of the request just read into
// body, or discards them when body is nil.
func (c *ServerCodec) ReadRequestBody(body any) error {
	m, data := c.cur, c.body
	c.cur, c.body = nil, nil
	if m == nil {
		return errors.New("netrpc: ReadRequestBody without ReadRequestHeader")
	}
	defer m.Release() // the message itself stays pending for its response
	if body == nil {
		return nil
	}
	if err := c.dec.decode(data, body); err != nil {
		return fmt.Errorf("netrpc: decode arguments: %w", err)
	}
	return nil
}

// WriteResponse answers the request numbered r.Seq. A reply too long
// for one Homa message is replaced by an error response, so the caller
// learns of it, and the error is returned.
func (c *ServerCodec) WriteResponse(r *rpc.Response, body any) error {
	c.pendingMu.Lock()
	m := c.pending[r.Seq]
	delete(c.pending, r.Seq)
	c.pendingMu.Unlock()
	if m == nil {
		if c.closed.Load() {
			return fmt.Errorf("netrpc: codec closed: %w", sock.ErrClosed)
		}
		return fmt.Errorf("netrpc: response to unknown request %d", r.Seq)
	}
	buf := getBuffer()
	defer putBuffer(buf)
	buf.Write(appendResponse(buf.AvailableBuffer(), r.ServiceMethod, r.Error))
	if r.Error == "" {
		// An error response carries no body: the client discards it.
		if err := c.enc.encode(buf, body); err != nil {
			err = fmt.Errorf("netrpc: encode %s reply: %w", r.ServiceMethod, err)
			_ = c.s.Reply(m, appendResponse(nil, r.ServiceMethod, err.Error()))
			return err
		}
	}
	err := c.s.Reply(m, buf.Bytes())
	if errors.Is(err, sock.ErrMessageTooLong) {
		err = fmt.Errorf("netrpc: %s reply of %d bytes: %w", r.ServiceMethod, buf.Len(), err)
		_ = c.s.Reply(m, appendResponse(nil, r.ServiceMethod, err.Error()))
		return err
	}
	if err != nil {
		return fmt.Errorf("netrpc: reply to %s: %w", r.ServiceMethod, err)
	}
	return nil
}

// Close ends the codec: a ReadRequestHeader in progress returns io.EOF,
// the socket is closed and requests still unanswered are forgotten (their
// clients' RPCs fail). Close is idempotent.
func (c *ServerCodec) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		c.cancel()
		c.err = c.s.Close()
		c.pendingMu.Lock()
		clear(c.pending)
		c.pendingMu.Unlock()
	})
	return c.err
}

// Dropped counts requests the codec answered with an error without
// handing them to net/rpc (malformed frames), and responses arriving at
// its socket.
func (c *ServerCodec) Dropped() uint64 { return c.dropped.Load() }
