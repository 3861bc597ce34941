package homagrpc

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/homa-go/homa/sock"
)

// A call made with grpc.WaitForReady(true) waits for a ready server
// instead of failing when none is. Homa has no connections, so "ready"
// means a server that answers: one that answered a call or a probe of
// this ClientConn since a call last found it unavailable. Before such a
// call goes to a server not known ready, the client probes it with a
// cancel frame naming no call (one small RPC, which any homagrpc server
// answers at once); a probe that fails (nothing listens, the host is
// unreachable, or it says nothing for the socket's PeerTimeout) moves to
// the next server, and after each round of the servers the call waits a
// backoff, until a server answers or the call's context ends. Once a
// server is ready the call is sent as any other, and fails as any other.

// Backoff between rounds of probes: from readyBackoffMin, growing by
// half each round, up to readyBackoffMax, with a fifth of jitter.
const (
	readyBackoffMin = 20 * time.Millisecond
	readyBackoffMax = 2 * time.Second
)

// pickReady returns the server for a call: the picker's choice, or with
// wait (WaitForReady) the first ready one, waiting for one until ctx
// ends.
func (c *ClientConn) pickReady(ctx context.Context, wait bool) (netip.AddrPort, error) {
	target := c.picker.pick()
	if !wait {
		return target, nil
	}
	backoff := readyBackoffMin
	for tries := 1; ; tries++ {
		if c.picker.isReady(target) {
			return target, nil
		}
		err := c.probe(ctx, target)
		if err == nil {
			c.picker.setReady(target)
			return target, nil
		}
		if ctx.Err() != nil {
			// The wait is over: the call ends as its context did, not as
			// the last probe, which may have failed (nothing listens) at
			// the moment the deadline passed (a late thread on a busy
			// machine).
			return target, transportError(ctx.Err())
		}
		if c.closed.Load() {
			return target, err
		}
		c.unavailable(target)
		if tries%c.picker.len() == 0 {
			d := backoff + time.Duration(rand.Int64N(int64(backoff/5)+1)) - backoff/10
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return target, transportError(ctx.Err())
			case <-c.closeCtx.Done():
				t.Stop()
				return target, failure(codes.Canceled, sock.ErrClosed, "homagrpc: the client connection is closing")
			}
			backoff = min(backoff*3/2, readyBackoffMax)
		}
		target = c.picker.pick()
	}
}

// probe asks the server at target for an answer: a cancel frame naming
// a fresh id, which no call has.
func (c *ClientConn) probe(ctx context.Context, target netip.AddrPort) error {
	frame := appendStreamReqHeader(make([]byte, 0, sreqHeaderLen), opCancel, 0, c.newID(), 0)
	rid, err := c.s.SendOwned(target, frame, 0)
	if err != nil {
		return transportError(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.closeCtx, cancel)()
	m, err := c.s.Recv(ctx, rid)
	if err != nil {
		_ = c.s.Abort(rid)
		return transportError(err)
	}
	defer m.Release()
	if m.Err != nil {
		return transportError(m.Err)
	}
	return nil
}
