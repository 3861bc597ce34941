package homagrpc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/homa-go/homa/sock"
)

// pullMux pulls the streams of a ClientConn to one server through pull
// sets (see pullSet): a stream that wants its next answer lists itself,
// and waits; the mux keeps one pull set at the server while any stream
// waits, and sends another at once to list streams that came since,
// unless two are out (the server then answers the first at once): the
// streams that list themselves meanwhile go in the next.
type pullMux struct {
	c      *ClientConn
	target netip.AddrPort
	id     uint64 // names the mux's pull set at the server

	mu       sync.Mutex
	waiting  map[uint64]*pending // by stream id: listed, or to be, and not yet answered
	fresh    []uint64            // the streams to list in the next pull set
	credits  map[uint64]uint64   // the credit each fresh stream lists
	inFlight int                 // pull sets out
	// alone: the server does not take pull sets (it answered one as a
	// frame it does not know): each stream pulls with its own RPC.
	alone bool
}

// pullSetsInFlight is how many pull sets a mux keeps out at most.
const pullSetsInFlight = 2

// maxPullEntries bounds the streams one pull set lists.
const maxPullEntries = (maxFrame - sreqHeaderLen) / pullEntryLen

// errPullAlone tells a stream to pull with its own RPC.
var errPullAlone = errors.New("homagrpc: the server takes no pull sets")

// pullsTo returns the pull mux of the server at target.
func (c *ClientConn) pullsTo(target netip.AddrPort) *pullMux { return &c.to(target).pulls }

// pull pulls stream id, granting credit, and waits within ctx for its
// answer, whose hold the caller owns. errPullAlone says the server takes
// no pull sets.
func (pm *pullMux) pull(ctx context.Context, id, credit uint64) ([]byte, *frameRef, error) {
	p := &pending{done: make(chan struct{})}
	pm.mu.Lock()
	if pm.alone {
		pm.mu.Unlock()
		return nil, nil, errPullAlone
	}
	if old := pm.waiting[id]; old != nil {
		old.put(nil, nil, errPullAlone) // cannot happen: one pull at a time a stream
	}
	pm.waiting[id] = p
	pm.fresh = append(pm.fresh, id)
	pm.credits[id] = credit
	pm.kick() // releases mu
	select {
	case <-p.done:
		return p.data, p.ref, p.err
	case <-ctx.Done():
		pm.mu.Lock()
		if pm.waiting[id] == p {
			delete(pm.waiting, id) // the answer, if it comes, is dropped
		}
		pm.mu.Unlock()
		p.drop(pm.c.s)
		return nil, nil, ctx.Err()
	}
}

// kick sends a pull set if one is due: streams to list, and fewer than
// pullSetsInFlight out, or streams waiting and none out. The caller
// holds mu, which kick releases.
func (pm *pullMux) kick() {
	if pm.alone || pm.inFlight >= pullSetsInFlight || len(pm.fresh) == 0 && (pm.inFlight > 0 || len(pm.waiting) == 0) {
		pm.mu.Unlock()
		return
	}
	if !pm.c.track() {
		pm.mu.Unlock()
		return
	}
	n := min(len(pm.fresh), maxPullEntries)
	frame := appendStreamReqHeader(sock.NewBuffer(sreqHeaderLen + n*pullEntryLen)[:0], opPulls, 0, pm.id, 0)
	for _, id := range pm.fresh[:n] {
		frame = appendPullEntry(frame, id, pm.credits[id])
		delete(pm.credits, id)
	}
	rest := copy(pm.fresh, pm.fresh[n:])
	pm.fresh = pm.fresh[:rest]
	pm.inFlight++
	pm.mu.Unlock()
	id, err := pm.c.s.SendOwned(pm.target, frame, 0)
	if err != nil {
		pm.done(nil, err)
		return
	}
	go pm.await(id)
}

// await awaits a pull set's answer and hands each stream its own.
func (pm *pullMux) await(id uint64) {
	m, err := pm.c.s.Recv(pm.c.closeCtx, id)
	if err != nil {
		_ = pm.c.s.Abort(id)
	} else if m.Err != nil {
		err = m.Err
		m.Release()
	}
	pm.done(m, err)
}

// done hands out the answer m to a pull set (or err, which fails every
// stream waiting), and sends the next pull set if one is due.
func (pm *pullMux) done(m *sock.Message, err error) {
	defer pm.c.wg.Done()
	if err == nil && len(m.Data) > 1 && m.Data[1] == kindStreamResp {
		// A server of the version before pull sets refused the pull
		// set as a frame it does not know (or this server refused it:
		// its client socket has more pullers than it keeps). Each
		// stream pulls alone from now on.
		m.Release()
		err = errPullAlone
		pm.mu.Lock()
		pm.alone = true
		pm.mu.Unlock()
	}
	if err == nil {
		err = pm.deliver(m)
	}
	pm.mu.Lock()
	pm.inFlight--
	if err != nil {
		for id, p := range pm.waiting {
			delete(pm.waiting, id)
			p.put(nil, nil, err)
		}
		pm.fresh = pm.fresh[:0]
		clear(pm.credits)
	}
	pm.kick()
}

// deliver hands each stream its answer in m, which it owns.
func (pm *pullMux) deliver(m *sock.Message) error {
	ref := newFrameRef(m) // one hold for deliver, one per answer handed out
	var ps []*pending
	var parts [][]byte
	pm.mu.Lock()
	err := parsePullAnswers(m.Data, func(id uint64, frame []byte) {
		if p := pm.waiting[id]; p != nil {
			delete(pm.waiting, id)
			ps, parts = append(ps, p), append(parts, frame)
		}
		// Else the stream gave up (its context ended): dropped.
	})
	pm.mu.Unlock()
	if err != nil {
		ref.release()
		return fmt.Errorf("homagrpc: the answer to a pull set: %w", err)
	}
	ref.n.Add(int32(len(ps)))
	for i, p := range ps {
		p.put(parts[i], ref, nil)
	}
	ref.release()
	return nil
}
