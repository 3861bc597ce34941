package homagrpc

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// callStats reports one call's events to the stats handlers of its
// side, in the order grpc-go reports them: Begin, OutHeader, payloads
// and InHeader as they go, InTrailer (client) or OutTrailer (server),
// End. A nil *callStats reports nothing.
type callStats struct {
	hs     []stats.Handler
	ctx    context.Context // as TagRPC returned it
	client bool
	method string
	comp   string
	begin  time.Time
	remote net.Addr
	local  net.Addr
	inHdr  bool // InHeader reported
	outHdr bool // OutHeader reported
}

// newCallStats tags the call with every handler and reports Begin. It
// returns the context the call goes on with.
func newCallStats(ctx context.Context, hs []stats.Handler, client bool, method, comp string, clientStream, serverStream bool, remote, local net.Addr) (context.Context, *callStats) {
	if len(hs) == 0 {
		return ctx, nil
	}
	for _, h := range hs {
		ctx = h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method, FailFast: true})
	}
	cs := &callStats{hs: hs, ctx: ctx, client: client, method: method, comp: comp, begin: time.Now(), remote: remote, local: local}
	cs.report(&stats.Begin{Client: client, BeginTime: cs.begin, FailFast: true, IsClientStream: clientStream, IsServerStream: serverStream})
	return ctx, cs
}

func (cs *callStats) report(s stats.RPCStats) {
	for _, h := range cs.hs {
		h.HandleRPC(cs.ctx, s)
	}
}

// outHeader reports the header metadata sent (on the client, the
// request's metadata), once.
func (cs *callStats) outHeader(md metadata.MD) {
	if cs == nil || cs.outHdr {
		return
	}
	cs.outHdr = true
	cs.report(&stats.OutHeader{Client: cs.client, Compression: cs.comp, Header: md.Copy(), FullMethod: cs.method, RemoteAddr: cs.remote, LocalAddr: cs.local})
}

// inHeader reports the header metadata received, once, when present.
func (cs *callStats) inHeader(md metadata.MD, present bool) {
	if cs == nil || !present || cs.inHdr {
		return
	}
	cs.inHdr = true
	cs.report(&stats.InHeader{Client: cs.client, Compression: cs.comp, Header: md.Copy(), FullMethod: cs.method, RemoteAddr: cs.remote, LocalAddr: cs.local})
}

func (cs *callStats) outPayload(v any, wire []byte) {
	if cs == nil {
		return
	}
	cs.report(&stats.OutPayload{Client: cs.client, Payload: v, Length: len(wire), CompressedLength: len(wire), WireLength: len(wire), SentTime: time.Now()})
}

func (cs *callStats) inPayload(v any, wire []byte) {
	if cs == nil {
		return
	}
	cs.report(&stats.InPayload{Client: cs.client, Payload: v, Length: len(wire), CompressedLength: len(wire), WireLength: len(wire), RecvTime: time.Now()})
}

// end reports the trailer and End.
func (cs *callStats) end(err error, trailer metadata.MD) {
	if cs == nil {
		return
	}
	if cs.client {
		cs.report(&stats.InTrailer{Client: true, Trailer: trailer.Copy()})
	} else {
		cs.report(&stats.OutTrailer{Trailer: trailer.Copy()})
	}
	cs.report(&stats.End{Client: cs.client, BeginTime: cs.begin, EndTime: time.Now(), Trailer: trailer.Copy(), Error: err})
}
