package homagrpc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/homa-go/homa/sock"
)

// ClientConn calls the unary methods of one gRPC server over Homa: each
// call is one Homa RPC from its socket. It implements
// grpc.ClientConnInterface, so protoc-generated clients take it as they
// take a *grpc.ClientConn. It is safe for concurrent use.
type ClientConn struct {
	s       *sock.Socket
	target  netip.AddrPort
	owns    bool // Close closes s
	opts    dialOptions
	invoker grpc.UnaryInvoker // c.invoke, bound once
	picker  *picker
	names   *reresolver   // nil unless the target names hosts
	nextID  atomic.Uint64 // call and stream ids
	// accept is what calls without a compressor of their own advertise
	// in grpc-accept-encoding (compressors register at init time).
	accept string

	// closeCtx ends at Close; streams and cancel frames wait in it.
	closeCtx    context.Context
	closeCancel context.CancelFunc
	wg          sync.WaitGroup // cancel frames and batches in flight

	mmu     sync.Mutex                   // guards servers, and closed against wg.Add
	servers map[netip.AddrPort]*toServer // what the streams share per server

	closed atomic.Bool
	once   sync.Once
	err    error
}

var _ grpc.ClientConnInterface = (*ClientConn)(nil)

// Dial opens a client socket (port 0) on the unspecified address of
// target's family, configured by cfg (nil for defaults), and returns a
// ClientConn to the server at target that owns the socket. Homa has no
// connections: nothing is sent before the first call, so an absent server
// shows up as that call's error (codes.Unavailable), unless the call
// waits for a server that answers (grpc.WaitForReady).
func Dial(target netip.AddrPort, cfg *sock.Config, opts ...DialOption) (*ClientConn, error) {
	if !target.Addr().IsValid() || target.Port() == 0 {
		return nil, fmt.Errorf("homagrpc: dial %v: %w", target, sock.ErrBadAddress)
	}
	return dial([]netip.AddrPort{target}, cfg, opts)
}

// dial opens a socket of the family of targets[0] and returns a
// ClientConn to targets that owns it.
func dial(targets []netip.AddrPort, cfg *sock.Config, opts []DialOption) (*ClientConn, error) {
	target := targets[0]
	local := netip.IPv4Unspecified()
	if target.Addr().Is6() && !target.Addr().Is4In6() {
		local = netip.IPv6Unspecified()
	}
	s, err := sock.Open(netip.AddrPortFrom(local, 0), cfg)
	if err != nil {
		return nil, fmt.Errorf("homagrpc: dial %v: %w", target, err)
	}
	c := newClientConn(s, targets, opts)
	c.owns = true
	return c, nil
}

// NewClientConn returns a ClientConn to the server at target that calls
// from the socket s. Several ClientConns may share one socket; s stays
// the caller's (Close leaves it open). Each call waits for its own RPC's
// response, so nobody may read s with Recv(ctx, sock.Any), which would
// take the responses.
func NewClientConn(s *sock.Socket, target netip.AddrPort, opts ...DialOption) *ClientConn {
	return newClientConn(s, []netip.AddrPort{target}, opts)
}

func newClientConn(s *sock.Socket, targets []netip.AddrPort, opts []DialOption) *ClientConn {
	c := &ClientConn{s: s, target: targets[0]}
	for _, o := range opts {
		o(&c.opts)
	}
	c.invoker = c.invoke
	c.accept = acceptList("", c.opts.accept)
	c.picker = newPicker(c.opts.balancer, targets)
	c.nextID.Store(rand.Uint64() >> 1)
	c.closeCtx, c.closeCancel = context.WithCancel(context.Background())
	return c
}

// newID returns a call or stream id, never 0 (which means none).
func (c *ClientConn) newID() uint64 {
	for {
		if id := c.nextID.Add(1); id != 0 {
			return id
		}
	}
}

// sendCancel tells the server at target that the call or stream id was
// abandoned, so that its handler's context ends. It does not wait.
func (c *ClientConn) sendCancel(target netip.AddrPort, id uint64) {
	if c.closed.Load() {
		return
	}
	frame := appendStreamReqHeader(make([]byte, 0, sreqHeaderLen), opCancel, 0, id, 0)
	rid, err := c.s.SendOwned(target, frame, 0)
	if err != nil {
		return
	}
	if !c.track() {
		_ = c.s.Abort(rid)
		return
	}
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.closeCtx, cancelWait)
		defer cancel()
		m, err := c.s.Recv(ctx, rid)
		if err != nil {
			_ = c.s.Abort(rid)
			return
		}
		m.Release()
	}()
}

// track counts a goroutine that Close waits for, unless Close has
// begun: then it reports false, and the goroutine must not start.
func (c *ClientConn) track() bool {
	c.mmu.Lock()
	defer c.mmu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.wg.Add(1)
	return true
}

// cancelWait bounds how long a cancel frame's response is awaited.
const cancelWait = 2 * time.Second

// Target is the server's address: for a ClientConn of several servers,
// the first of those it was made with, which a re-resolution of the
// target's names may since have replaced (Targets has the current ones).
func (c *ClientConn) Target() netip.AddrPort { return c.target }

// Close ends the ClientConn: later calls fail with codes.Canceled. When
// it owns its socket (Dial), the socket is closed and calls in progress
// end with codes.Canceled too. Close is idempotent.
func (c *ClientConn) Close() error {
	c.once.Do(func() {
		c.mmu.Lock()
		c.closed.Store(true) // no track after this
		c.mmu.Unlock()
		c.closeCancel()
		if c.owns {
			c.err = c.s.Close()
		}
		c.wg.Wait()
	})
	return c.err
}

// NewStream opens a stream of the method, as grpc.ClientConn's method of
// that name does, through the client's stream interceptors when it has
// them; protoc-generated clients call it for streaming methods.
func (c *ClientConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if c.opts.streamInt != nil {
		return c.opts.streamInt(ctx, desc, nil, method, c.newStream, opts...)
	}
	return c.newStream(ctx, desc, nil, method, opts...)
}

// newStream is a grpc.Streamer.
func (c *ClientConn) newStream(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ci, err := c.callInfo(opts)
	if err != nil {
		return nil, err
	}
	if c.closed.Load() {
		return nil, failure(codes.Canceled, sock.ErrClosed, "homagrpc: the client connection is closing")
	}
	if err := ctx.Err(); err != nil {
		return nil, transportError(err)
	}
	target, err := c.pickReady(ctx, ci.waitForReady)
	if err != nil {
		return nil, err
	}
	if ci.peer != nil {
		ci.peer.Addr = Addr(target)
		ci.peer.LocalAddr = Addr(c.s.LocalAddr())
	}
	ctx, st := newCallStats(ctx, c.opts.statsHs, true, method, ci.compressor, desc.ClientStreams, desc.ServerStreams, Addr(target), Addr(c.s.LocalAddr()))
	cs, err := c.newClientStream(ctx, desc, method, &ci, target)
	if err != nil {
		if st != nil {
			st.end(err, nil)
		}
		return nil, err
	}
	if st != nil {
		md, _ := metadata.FromOutgoingContext(ctx)
		st.outHeader(md)
		cs.stats = st
	}
	if ci.onFinish != nil || ci.header != nil || ci.trailer != nil {
		go func() {
			<-cs.doneCh
			cs.mu.Lock()
			final, header, trailer := cs.final, cs.header, cs.trailer
			cs.mu.Unlock()
			if ci.header != nil {
				*ci.header = header
			}
			if ci.trailer != nil {
				*ci.trailer = trailer
			}
			for _, f := range ci.onFinish {
				f(final)
			}
		}()
	}
	return cs, nil
}

// callInfo applies the default and the call's options.
func (c *ClientConn) callInfo(opts []grpc.CallOption) (callInfo, error) {
	ci := callInfo{maxRecv: -1, maxSend: -1}
	for _, o := range c.opts.callOptions {
		if err := ci.apply(o); err != nil {
			return ci, err
		}
	}
	for _, o := range opts {
		if err := ci.apply(o); err != nil {
			return ci, err
		}
	}
	return ci, ci.chooseCodec()
}

// Invoke calls the unary method with args and decodes the response into
// reply, through the client's interceptors when it has them.
func (c *ClientConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if c.opts.interceptor != nil {
		return c.opts.interceptor(ctx, method, args, reply, nil, c.invoker, opts...)
	}
	return c.invoke(ctx, method, args, reply, nil, opts...)
}

// callInfo is what the call options of one call decide.
type callInfo struct {
	codec      encoding.CodecV2
	subtype    string // codec name on the wire; empty for proto
	compressor string // grpc.UseCompressor; empty: none
	maxRecv    int
	maxSend    int
	header     *metadata.MD
	trailer    *metadata.MD
	peer       *peer.Peer
	creds      []grpc.PerRPCCredsCallOption
	onFinish   []func(error)
	// waitForReady: grpc.WaitForReady(true), see ready.go.
	waitForReady bool
}

// apply applies one call option. Options that have no meaning over Homa
// (static method, retry buffer, authority) are ignored.
func (ci *callInfo) apply(o grpc.CallOption) error {
	switch o := o.(type) {
	case grpc.HeaderCallOption:
		ci.header = o.HeaderAddr
	case grpc.TrailerCallOption:
		ci.trailer = o.TrailerAddr
	case grpc.PeerCallOption:
		ci.peer = o.PeerAddr
	case grpc.MaxRecvMsgSizeCallOption:
		ci.maxRecv = o.MaxRecvMsgSize
	case grpc.MaxSendMsgSizeCallOption:
		ci.maxSend = o.MaxSendMsgSize
	case grpc.OnFinishCallOption:
		ci.onFinish = append(ci.onFinish, o.OnFinish)
	case grpc.PerRPCCredsCallOption:
		ci.creds = append(ci.creds, o)
	case grpc.ContentSubtypeCallOption:
		ci.subtype = strings.ToLower(o.ContentSubtype)
	case grpc.ForceCodecV2CallOption:
		ci.codec = o.CodecV2
	case grpc.ForceCodecCallOption:
		ci.codec = codecV1{o.Codec}
	case grpc.CompressorCallOption:
		ci.compressor = o.CompressorType
	case grpc.FailFastCallOption:
		ci.waitForReady = !o.FailFast
	}
	return nil
}

// chooseCodec settles the codec and the content subtype, as grpc-go
// does: a forced codec is used, under the subtype given or else its own
// name; otherwise the codec registered for the subtype given, or proto.
func (ci *callInfo) chooseCodec() error {
	switch {
	case ci.codec != nil:
		if ci.subtype == "" {
			ci.subtype = strings.ToLower(ci.codec.Name())
		}
	case ci.subtype != "":
		if ci.codec = getCodec(ci.subtype); ci.codec == nil {
			return status.Errorf(codes.Internal, "homagrpc: no codec registered for content-subtype %q", ci.subtype)
		}
	default:
		ci.codec = protoCodec()
	}
	if ci.subtype == "proto" {
		ci.subtype = "" // the default needs no name on the wire
	}
	return nil
}

// invoke is the call itself: a grpc.UnaryInvoker.
func (c *ClientConn) invoke(ctx context.Context, method string, args, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) (err error) {
	ci, err := c.callInfo(opts)
	if ci.onFinish != nil {
		defer func() {
			for _, f := range ci.onFinish {
				f(err)
			}
		}()
	}
	if err != nil {
		return err
	}
	if c.closed.Load() {
		return failure(codes.Canceled, sock.ErrClosed, "homagrpc: the client connection is closing")
	}
	if err := ctx.Err(); err != nil {
		return transportError(err)
	}
	target, err := c.pickReady(ctx, ci.waitForReady)
	if err != nil {
		return err
	}
	if ci.peer != nil {
		ci.peer.Addr = Addr(target)
		ci.peer.LocalAddr = Addr(c.s.LocalAddr())
	}
	comp, err := compressor(ci.compressor)
	if err != nil {
		return err
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return transportError(context.DeadlineExceeded)
		}
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	if len(ci.creds) > 0 {
		if md, err = addCreds(ctx, md, ci.creds, method); err != nil {
			return err
		}
	}
	var st *callStats
	if len(c.opts.statsHs) > 0 {
		ctx, st = newCallStats(ctx, c.opts.statsHs, true, method, ci.compressor, false, false, Addr(target), Addr(c.s.LocalAddr()))
		st.outHeader(md)
		var trailer metadata.MD
		if ci.trailer == nil {
			ci.trailer = &trailer
		}
		defer func() { st.end(err, *ci.trailer) }()
	}

	// The request, with the call's id, which a cancel frame names to end
	// the handler's context and the server names a response too long for
	// one Homa message by.
	h := reqHead{codec: ci.subtype, comp: ci.compressor, compressed: comp != nil, method: method, timeout: timeout, md: md, callID: c.newID(), accept: c.acceptFor(ci.compressor)}
	buf := getBuffer()
	frame, err := appendRequestHead(*buf, h)
	if err != nil {
		putBuffer(buf, frame)
		return status.Error(codes.Internal, err.Error())
	}
	start := len(frame)
	if frame, err = appendMessage(frame, ci.codec, args); err != nil {
		putBuffer(buf, frame)
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	n := len(frame) - start
	if ci.maxSend >= 0 && n > ci.maxSend {
		putBuffer(buf, frame)
		return status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", n, ci.maxSend)
	}
	if len(frame) > maxFrame {
		putBuffer(buf, frame)
		return c.invokeStream(ctx, method, args, reply, &ci, target)
	}
	if st != nil {
		st.outPayload(args, frame[start:])
	}
	if comp != nil {
		z, err := compress(comp, frame[start:])
		if err != nil {
			putBuffer(buf, frame)
			return err
		}
		frame = append(frame[:start], z...)
	}
	id, err := c.s.Send(target, frame, 0)
	putBuffer(buf, frame)
	if err != nil {
		return transportError(err)
	}

	// The response.
	m, err := c.s.Recv(ctx, id)
	if err != nil {
		_ = c.s.Abort(id)
		if c.closed.Load() {
			return failure(codes.Canceled, err, "homagrpc: the client connection is closing")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			// The server's copy of a deadline ends the handler by itself.
			c.sendCancel(target, h.callID)
		}
		return transportError(err)
	}
	if m.Err == nil && len(m.Data) > 1 && m.Data[1] == kindStreamResp {
		return c.finishLarge(ctx, target, h.callID, m, &ci, comp, st, reply)
	}
	defer m.Release()
	if m.Err != nil {
		err := transportError(m.Err)
		if status.Code(err) == codes.Unavailable {
			c.unavailable(target)
		}
		return err
	}
	c.picker.setReady(target)
	resp, err := parseResponse(m.Data)
	if err != nil {
		return transportError(err)
	}
	msg := inMsg{data: resp.payload, compressed: resp.flags&respFlagCompressed != 0}
	if resp.nHeader > 0 || ci.header != nil || st != nil {
		header := parseMD(resp.header, resp.nHeader)
		if comp, err = recvCompressor(header, comp); err != nil && msg.compressed {
			return err
		}
		if ci.header != nil {
			*ci.header = header
		}
		st.inHeader(header, true)
	}
	if ci.trailer != nil {
		*ci.trailer = parseMD(resp.trailer, resp.nTrailer)
	}
	if resp.code != uint32(codes.OK) {
		if err := callerEnded(ctx, codes.Code(resp.code)); err != nil {
			return err
		}
		return responseStatus(resp).Err()
	}
	if err := decodeMsg(ci.codec, comp, msg, recvLimit(ci.maxRecv), reply); err != nil {
		return err
	}
	if st != nil {
		st.inPayload(reply, resp.payload)
	}
	return nil
}

// responseStatus is the status of a failed call: the details when the
// server sent them (a google.rpc.Status, which must agree with the
// code), otherwise the code and message.
func responseStatus(r response) *status.Status {
	if len(r.details) == 0 {
		return status.New(codes.Code(r.code), string(r.message))
	}
	var sp spb.Status
	if err := proto.Unmarshal(r.details, &sp); err != nil {
		return status.Newf(codes.Internal, "homagrpc: undecodable status details: %v", err)
	}
	if uint32(sp.Code) != r.code {
		return status.Newf(codes.Internal, "homagrpc: status details with code %d under status code %d", sp.Code, r.code)
	}
	return status.FromProto(&sp)
}

// addCreds adds the metadata of per-RPC credentials. Homa carries no
// transport security, so credentials that require it fail the call.
func addCreds(ctx context.Context, md metadata.MD, creds []grpc.PerRPCCredsCallOption, method string) (metadata.MD, error) {
	md = md.Copy()
	if md == nil {
		md = metadata.MD{}
	}
	for _, c := range creds {
		if c.Creds.RequireTransportSecurity() {
			return nil, status.Error(codes.Unauthenticated, "homagrpc: per-RPC credentials require transport security, which Homa does not provide")
		}
		kv, err := c.Creds.GetRequestMetadata(ctx, method)
		if err != nil {
			return nil, status.Errorf(codes.Unauthenticated, "homagrpc: getting per-RPC credentials: %v", err)
		}
		for k, v := range kv {
			md.Append(k, v)
		}
	}
	return md, nil
}

// callerEnded reports the caller's context as the cause when a call
// failed with DeadlineExceeded or Canceled while that context was ending
// too: the server's deadline is the caller's, and its timer may fire
// first.
func callerEnded(ctx context.Context, c codes.Code) error {
	switch c {
	case codes.DeadlineExceeded:
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return transportError(context.DeadlineExceeded)
		}
	case codes.Canceled:
		if err := ctx.Err(); err != nil {
			return transportError(err)
		}
	}
	return nil
}
