package netrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"sync"
	"sync/atomic"
	"time"

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
	seq     uint64
	cur     *sock.Message // the request's Homa RPC, to answer
	in      inbound       // its message
	hdr     int           // the length of its header: the body follows
	curCost int           // bytes of a large request counted by the store

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

	large *largeServer

	enc   encoders
	dec   decoders
	drops dropCounters
}

var _ rpc.ServerCodec = (*ServerCodec)(nil)

// NewServerCodec returns a codec serving the requests that arrive at the
// server socket s, which it owns from now on, for rpc.Server.ServeCodec.
func NewServerCodec(s *sock.Socket) *ServerCodec {
	return newServerCodec(newServerShared(s, nil), nil)
}

func newServerShared(s *sock.Socket, cfg *Config) *serverShared {
	ctx, cancel := context.WithCancel(context.Background())
	sh := &serverShared{s: s, ctx: ctx, cancel: cancel, cfg: cfg.withDefaults()}
	sh.large = newLargeServer(&sh.cfg, s.LocalAddr())
	return sh
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
		sh.large.free()
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
			sh.drops.responses.Add(1)
			m.Release()
			continue
		}
		in, cost, ok := c.take(m)
		if !ok {
			continue
		}
		method, body, err := parseRequest(in.first)
		if err != nil && in.rest != nil {
			in.join() // a header longer than the first part
			method, body, err = parseRequest(in.first)
		}
		if err == nil && sh.shutting.Load() {
			err = fmt.Errorf("netrpc: server %v is %w; %s did not run", sh.s.LocalAddr(), errShuttingDown, method)
		}
		if err != nil {
			sh.drop(err)
			_ = sh.s.Reply(m, appendResponse(nil, string(method), err.Error()))
			in.free()
			sh.large.release(m.Peer.Addr(), cost)
			continue
		}
		sh.inflight.Add(1)
		c.seq++
		r.Seq = c.seq
		r.ServiceMethod = string(method)
		c.cur, c.in, c.hdr, c.curCost = m, in, len(in.first)-len(body), cost
		c.pendingMu.Lock()
		c.pending[c.seq] = m
		c.pendingMu.Unlock()
		return nil
	}
}

// take handles what arrived in m besides whole requests: parts of large
// requests (acknowledged, or completing their request) and pulls of
// large replies. It returns the request that m is or completes, and
// the bytes the large-message store counts for it; false when there is
// none.
func (c *ServerCodec) take(m *sock.Message) (in inbound, cost int, ok bool) {
	sh := c.sh
	var err error
	switch kindOf(m.Data) {
	case kindRequestPart:
		var p part
		if p, err = parsePart(m.Data, kindRequestPart); err == nil {
			var res partResult
			var done *assembler
			res, done, cost, err = sh.large.takePart(m, p, time.Now(), sh.shutting.Load())
			switch res {
			case partHeld: // m is the store's now
				_ = sh.s.Reply(m, appendPart(nil, part{kind: kindPartAck, total: p.total, offset: p.offset, id: p.id}))
				return inbound{}, 0, false
			case partComplete:
				return assembled(done), cost, true
			}
		}
	case kindReplyPull:
		var p part
		var b []byte
		if p, err = parsePart(m.Data, kindReplyPull); err == nil {
			b, err = sh.large.pull(m.Peer, p, time.Now())
		}
		if err == nil { // b is a part of an outMsg, and the socket's now
			putPartHeader(b, kindReplyPart, p.total, p.offset/partData, p.id)
			_ = sh.s.ReplyOwned(m, b)
			m.Release()
			return inbound{}, 0, false
		}
	default:
		if len(m.Data) <= sh.cfg.MaxMessage {
			return wholeMessage(m), 0, true
		}
		err = tooLong("request", len(m.Data), sh.cfg.MaxMessage, "server")
	}
	sh.drop(err)
	_ = sh.s.Reply(m, appendResponse(nil, "", err.Error()))
	m.Release()
	return inbound{}, 0, false
}

// ReadRequestBody decodes the arguments of the request just read into
// body, or discards them when body is nil.
func (c *ServerCodec) ReadRequestBody(body any) error {
	m, in, hdr, cost := c.cur, c.in, c.hdr, c.curCost
	c.cur, c.in, c.hdr, c.curCost = nil, inbound{}, 0, 0
	if m == nil {
		return errors.New("netrpc: ReadRequestBody without ReadRequestHeader")
	}
	defer in.free() // the Homa RPC itself stays pending for its response
	if cost > 0 {
		defer c.sh.large.release(m.Peer.Addr(), cost)
	}
	if body == nil {
		return nil
	}
	if err := in.decodeBody(&c.sh.dec, hdr, body); err != nil {
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
	out := newOutMsg(c.sh.cfg.MaxMessage)
	defer out.release()
	out.Write(appendResponse(out.head.AvailableBuffer(), r.ServiceMethod, r.Error))
	if r.Error == "" {
		// An error response carries no body: the client discards it.
		if err := c.sh.enc.encode(out, body); err != nil {
			err = fmt.Errorf("netrpc: encode %s reply: %w", r.ServiceMethod, err)
			_ = s.Reply(m, appendResponse(nil, r.ServiceMethod, err.Error()))
			return err
		}
	}
	if out.tooLong() || out.parts != nil {
		return c.writeLarge(m, r.ServiceMethod, out)
	}
	if err := s.Reply(m, out.head.Bytes()); err != nil {
		return fmt.Errorf("netrpc: reply to %s: %w", r.ServiceMethod, err)
	}
	return nil
}

// writeLarge answers m with out, a reply longer than one Homa message or
// than Config.MaxMessage, whose parts it takes over: it sends the first
// part, and keeps the others for the client to pull. A reply it cannot
// send is replaced by an error response, so the caller learns of it, and
// the error returned.
func (c *ServerCodec) writeLarge(m *sock.Message, method string, out *outMsg) error {
	sh := c.sh
	var err error
	if out.tooLong() {
		err = tooLong(method+" reply", out.n, sh.cfg.MaxMessage, "server")
	}
	var id uint64
	if err == nil {
		id, err = sh.large.storeReply(m.Peer, out.parts[1:], out.n, time.Now())
	}
	if err != nil {
		_ = sh.s.Reply(m, appendResponse(nil, method, err.Error()))
		return err
	}
	head := out.parts[0]
	putPartHeader(head, kindReplyPart, out.n, 0, id)
	if err := sh.s.ReplyOwned(m, head); err != nil {
		return fmt.Errorf("netrpc: reply to %s: %w", method, err)
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
// handing them to net/rpc (malformed frames, parts of large messages
// it refused), and responses arriving at its socket; Drops says why.
func (c *ServerCodec) Dropped() uint64 { return c.sh.drops.snapshot().Total() }

// Drops counts what the codec refused or discarded, by reason.
func (c *ServerCodec) Drops() Drops { return c.sh.drops.snapshot() }
