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
	sh   *serverShared
	pool *workers // set when the codec is one of Serve's workers

	// The reading goroutine's own: the last number given out, and the
	// request between ReadRequestHeader and ReadRequestBody.
	seq  uint64
	cur  *sock.Message
	body []byte

	pendingMu sync.Mutex
	pending   map[uint64]*sock.Message // seq -> request awaiting its response
}

// serverShared is what every codec reading one socket shares.
type serverShared struct {
	s      *sock.Socket
	ctx    context.Context // ends when the socket is closed here
	cancel context.CancelFunc
	cfg    Config
	closed atomic.Bool
	once   sync.Once
	err    error // from closing the socket

	// shutting is set by Shutdown: new requests are refused. inflight
	// counts the calls handed to net/rpc and not yet answered.
	shutting atomic.Bool
	inflight atomic.Int64

	enc     encoders
	dec     decoders
	dropped atomic.Uint64
}

var _ rpc.ServerCodec = (*ServerCodec)(nil)

// NewServerCodec returns a codec serving the requests that arrive at the
// server socket s, which it owns from now on, for rpc.Server.ServeCodec.
func NewServerCodec(s *sock.Socket) *ServerCodec {
	return newServerCodec(newServerShared(s, nil), nil)
}

func newServerShared(s *sock.Socket, cfg *Config) *serverShared {
	ctx, cancel := context.WithCancel(context.Background())
	return &serverShared{s: s, ctx: ctx, cancel: cancel, cfg: cfg.withDefaults()}
}

func newServerCodec(sh *serverShared, pool *workers) *ServerCodec {
	return &ServerCodec{sh: sh, pool: pool, pending: make(map[uint64]*sock.Message)}
}

// close closes the socket, once.
func (sh *serverShared) close() error {
	sh.once.Do(func() {
		sh.closed.Store(true)
		sh.cancel()
		sh.err = sh.s.Close()
	})
	return sh.err
}

// ReadRequestHeader waits for the next request. A request that is not a
// valid frame is answered at once with an error and counted (Dropped);
// net/rpc never sees it. After Close, or when the socket closes, it
// returns io.EOF, which ends rpc.Server.ServeCodec. Any other failure to
// receive closes the socket, which cannot serve any more.
func (c *ServerCodec) ReadRequestHeader(r *rpc.Request) error {
	sh := c.sh
	for {
		if c.pool != nil {
			c.pool.idle.Add(1)
		}
		m, err := sh.s.Recv(sh.ctx, sock.Any)
		if c.pool != nil && c.pool.idle.Add(-1) == 0 && err == nil {
			c.pool.spawn() // someone must wait for requests while this one works
		}
		if err != nil {
			if sh.closed.Load() || errors.Is(err, sock.ErrClosed) {
				return io.EOF
			}
			sh.close()
			return fmt.Errorf("netrpc: receive: %w", err)
		}
		if !m.IsRequest() {
			// Only a socket that also sent requests gets responses.
			sh.dropped.Add(1)
			m.Release()
			continue
		}
		method, body, err := parseRequest(m.Data)
		if err == nil && sh.shutting.Load() {
			err = fmt.Errorf("netrpc: server %v is shutting down; %s did not run", sh.s.LocalAddr(), method)
		}
		if err != nil {
			sh.dropped.Add(1)
			_ = sh.s.Reply(m, appendResponse(nil, string(method), err.Error()))
			m.Release()
			continue
		}
		sh.inflight.Add(1)
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
	if err := c.sh.dec.decode(data, body); err != nil {
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
	if m != nil {
		defer c.sh.inflight.Add(-1) // once the reply is on its way
	}
	if m == nil {
		if c.sh.closed.Load() {
			return fmt.Errorf("netrpc: codec closed: %w", sock.ErrClosed)
		}
		return fmt.Errorf("netrpc: response to unknown request %d", r.Seq)
	}
	s := c.sh.s
	buf := getBuffer()
	defer putBuffer(buf)
	buf.Write(appendResponse(buf.AvailableBuffer(), r.ServiceMethod, r.Error))
	if r.Error == "" {
		// An error response carries no body: the client discards it.
		if err := c.sh.enc.encode(buf, body); err != nil {
			err = fmt.Errorf("netrpc: encode %s reply: %w", r.ServiceMethod, err)
			_ = s.Reply(m, appendResponse(nil, r.ServiceMethod, err.Error()))
			return err
		}
	}
	err := s.Reply(m, buf.Bytes())
	if errors.Is(err, sock.ErrMessageTooLong) {
		err = fmt.Errorf("netrpc: %s reply of %d bytes: %w", r.ServiceMethod, buf.Len(), err)
		_ = s.Reply(m, appendResponse(nil, r.ServiceMethod, err.Error()))
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
	err := c.sh.close()
	c.pendingMu.Lock()
	c.sh.inflight.Add(-int64(len(c.pending)))
	clear(c.pending)
	c.pendingMu.Unlock()
	return err
}

// Dropped counts requests the codec answered with an error without
// handing them to net/rpc (malformed frames), and responses arriving at
// its socket.
func (c *ServerCodec) Dropped() uint64 { return c.sh.dropped.Load() }
