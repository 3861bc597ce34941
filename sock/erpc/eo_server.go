package erpc

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/sock"
)

// The server side of exactly-once requests: completion records in the
// RIFL style, kept per server Rpc and keyed by (client id, sequence). The
// client id is the client's lease (see lease.go), not its session: a
// record outlives the session its request came on, so that a copy sent
// on a later session of the same client finds it. Per client id the
// table keeps the ack floor, for as long as the lease lives. A record is:
//
//	in progress  the handler runs; a duplicate is parked (the newest one
//	             only) and answered with the response when it comes
//	completed    the response is kept; a duplicate gets it again
//	tombstone    acknowledged (or expired) but copies of the request may
//	             still arrive: they are answered stale, never run
//
// A request below its client's ack floor has no record and is answered
// stale. Records go away:
//   - by the floor: every record below it is deleted;
//   - by acknowledgment with a retry count: deleted when every copy the
//     client sent has arrived, else a tombstone for PacketLifetime;
//   - by timeout: a completed record unacknowledged for RecordTimeout
//     becomes a tombstone, deleted PacketLifetime later;
//   - with the client's lease, when it expires (a later request under the
//     lease is refused: the client's connects are refused as expired).
//
// Memory is bounded: at most MaxRecords records, and at most
// MaxRecordBytes of responses, of which the clients of one host hold at
// most MaxRecordsPerHost and MaxRecordBytesPerHost. A record in progress reserves
// recordReserve bytes, not the largest response: a new request is
// refused, unexecuted and retryably, when the records hold or reserve so
// much that another reservation does not fit. A response is kept if it
// fits in what is left when it comes (its reservation given back); one
// that does not is still sent to the client, but the record keeps only
// the fact that the request ran, and a duplicate gets ErrResponseLost: a
// handler never runs twice, whatever the budget.
type eoTable struct {
	cfg   *ExactlyOnceConfig
	stats *counters
	pool  *bufPool // the Rpc's: large responses' storages go back there

	mu       sync.Mutex
	recs     map[eoKey]*eoRecord
	clients  map[uint64]*eoClient
	hosts    map[netip.Addr]*eoHost // of the clients, by host
	bytes    int                    // response bytes held by completed records
	reserved int                    // recordReserve per record in progress
	done     dlist[eoRecord]        // completed records, by completion time
	tombs    dlist[eoRecord]        // tombstones, by when they became one
	free     []*eoRecord            // deleted records, for reuse

	// next is the Unix time in nanoseconds at which collect has work, or
	// 0: the event loop reads it without the lock.
	next atomic.Int64
}

type eoKey struct {
	client uint64 // the client id (lease)
	seq    uint64
}

// eoClient is the exactly-once state of one client id at this Rpc: its
// ack floor and records. It lives as long as the client's lease.
type eoClient struct {
	id    uint64
	lease *lease
	host  *eoHost
	floor uint64          // every sequence below it is acknowledged
	recs  dlist[eoRecord] // this client's records
}

// eoHost is what the records of the clients of one host hold: their
// number, response bytes and reservations, within the host's shares.
type eoHost struct {
	clients         int // eoClients of the host
	recs            int
	bytes, reserved int
}

// recordReserve is what a record in progress reserves of
// MaxRecordBytes: room for a small response and its header.
const recordReserve = 1024

type recState uint8

const (
	recInProgress recState = iota
	recCompleted
	recTomb
)

type eoRecord struct {
	key      eoKey
	cl       *eoClient
	state    recState
	frame    []byte        // the response as sent, header included (completed)
	store    []byte        // a large response: the storage of frame, the record's own
	sending  bool          // EnqueueResponse still sends from store
	received uint32        // copies of the request that arrived
	expect   uint32        // copies the client sent, from its acknowledgment; 0 until then
	parked   *sock.Message // the newest duplicate, while in progress
	deleted  bool          // no longer in the table (the handler may still hold it)
	gcLink   dlink[eoRecord]
	clLink   dlink[eoRecord]
}

// eoVerdict is what admit decided for an exactly-once request.
type eoVerdict uint8

const (
	eoNew        eoVerdict = iota // run the handler
	eoCompleted                   // answer with the record's response
	eoInProgress                  // parked until the original completes
	eoStale                       // answer stale
	eoFull                        // refuse: no room for a record
	eoGone                        // the session is gone
	eoLost                        // it ran, but its response was not kept
)

func (t *eoTable) init(cfg *ExactlyOnceConfig, st *counters, pool *bufPool) {
	t.cfg, t.stats, t.pool = cfg, st, pool
	t.recs = make(map[eoKey]*eoRecord)
	t.clients = make(map[uint64]*eoClient)
	t.hosts = make(map[netip.Addr]*eoHost)
	t.done = newDlist(func(x *eoRecord) *dlink[eoRecord] { return &x.gcLink })
	t.tombs = newDlist(func(x *eoRecord) *dlink[eoRecord] { return &x.gcLink })
}

// admit looks up the record of an exactly-once request m (header h) of
// session ss, applying the acknowledgments h carries first. For a new
// request it makes the record if create (else it returns eoNew with no
// record: a fragment of a request not complete yet). For a completed one
// it returns the response frame to send (of a large response, the first
// fragment). For one in progress it parks m and returns the duplicate it
// replaces, if any, to be answered. copied says m is a copy of the
// request to count (every message of a small request, the first fragment
// of a large one: counting fewer copies than arrived is safe, more is
// not). The first fragment of a large response is copied into scratch
// (the event loop's), since its storage goes back to the pool when the
// record lets it go.
func (t *eoTable) admit(ss *srvSession, h *header, m *sock.Message, create, copied bool, scratch *[]byte) (v eoVerdict, rec *eoRecord, frame []byte, old *sock.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.updateNextLocked()
	cl := t.clientLocked(ss)
	if cl == nil {
		return eoGone, nil, nil, nil
	}
	t.ackLocked(cl, h)
	if h.seq < cl.floor {
		t.stats.staleDups.Add(1)
		return eoStale, nil, nil, nil
	}
	key := eoKey{cl.id, h.seq}
	rec = t.recs[key]
	if rec == nil && !create {
		return eoNew, nil, nil, nil
	}
	if rec == nil {
		hs := cl.host
		if len(t.recs) >= t.cfg.MaxRecords || t.bytes+t.reserved+recordReserve > t.cfg.MaxRecordBytes {
			t.stats.full.Add(1)
			return eoFull, nil, nil, nil
		}
		if hs.recs >= t.cfg.MaxRecordsPerHost || hs.bytes+hs.reserved+recordReserve > t.cfg.MaxRecordBytesPerHost {
			t.stats.full.Add(1)
			t.stats.fullPerHost.Add(1)
			return eoFull, nil, nil, nil
		}
		if k := len(t.free); k > 0 {
			rec = t.free[k-1]
			t.free = t.free[:k-1]
		} else {
			rec = &eoRecord{}
		}
		rec.key, rec.cl, rec.received = key, cl, 1
		t.recs[key] = rec
		cl.recs.push(rec, time.Time{})
		t.reserved += recordReserve
		hs.recs++
		hs.reserved += recordReserve
		return eoNew, rec, nil, nil
	}
	if copied {
		rec.received++
	}
	switch rec.state {
	case recInProgress:
		t.stats.inProgress.Add(1)
		old, rec.parked = rec.parked, m
		m.Release() // the reply needs the RPC's identity, not the data
		return eoInProgress, nil, nil, old
	case recCompleted:
		t.stats.dups.Add(1)
		if rec.frame == nil {
			return eoLost, nil, nil, nil
		}
		frame = rec.frame[:min(len(rec.frame), eoHeaderLen+fragChunk)]
		if rec.store != nil {
			*scratch = append((*scratch)[:0], frame...)
			frame = *scratch
		}
		return eoCompleted, nil, frame, nil
	}
	t.stats.staleDups.Add(1)
	if copied && rec.expect != 0 && rec.received >= rec.expect {
		t.deleteLocked(rec) // that was the last copy
	}
	return eoStale, nil, nil, nil
}

// pullFrame returns the reply to an exactly-once pull of the fragment at
// off of the response of (client, seq), built from its record: the
// header and the fragment's data. It returns nil and statusOK when the
// record holds no large response to pull from (the large table may hold
// it), or a status when the pull cannot be answered. The frame is
// appended to dst: the event loop's scratch buffer, since the record's
// frame is read without the lock by the replies to duplicates and cannot
// take a header in place.
func (t *eoTable) pullFrame(client, seq uint64, off int, dst []byte) ([]byte, status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec := t.recs[eoKey{client, seq}]
	switch {
	case rec == nil || rec.state != recCompleted:
		return nil, statusStale
	case rec.frame == nil:
		return nil, statusOK // not kept: perhaps in the large table
	}
	var h header
	if _, err := h.Parse(rec.frame); err != nil || h.flags&flagFragment == 0 {
		return nil, statusStale // a small response: nothing to pull
	}
	total := int(h.total)
	if off <= 0 || off >= total || off%fragChunk != 0 {
		return nil, statusStale
	}
	end := min(off+fragChunk, total)
	h.fragOff = uint32(off)
	return append(h.Append(dst), rec.frame[eoHeaderLen+off:eoHeaderLen+end]...), statusOK
}

// clientLocked returns the state of the client id of session ss, made if
// need be; nil if the client's lease has expired.
func (t *eoTable) clientLocked(ss *srvSession) *eoClient {
	if ss.lease.dead.Load() {
		return nil
	}
	cl := t.clients[ss.clientID]
	if cl == nil {
		hs := t.hosts[ss.lease.host]
		if hs == nil {
			hs = &eoHost{}
			t.hosts[ss.lease.host] = hs
		}
		hs.clients++
		cl = &eoClient{id: ss.clientID, lease: ss.lease, host: hs}
		cl.recs = newDlist(func(x *eoRecord) *dlink[eoRecord] { return &x.clLink })
		t.clients[cl.id] = cl
	}
	return cl
}

// ack applies the acknowledgments of an ack message.
func (t *eoTable) ack(ss *srvSession, h *header) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.updateNextLocked()
	if cl := t.clientLocked(ss); cl != nil {
		t.ackLocked(cl, h)
	}
}

// ackLocked moves the floor of cl and applies a single acknowledgment.
// (Expiry is left to collect, which the event loop runs when due.)
func (t *eoTable) ackLocked(cl *eoClient, h *header) {
	if h.ackFloor > cl.floor {
		cl.floor = h.ackFloor
		// Records are in the order they arrived, nearly the order of
		// their sequences: delete from the front up to the first at or
		// above the floor. One that arrived early (from another session
		// of the client) goes when a later floor reaches the records
		// before it; the scan stays short whatever the client's window.
		for rec := cl.recs.Front(); rec != nil && rec.key.seq < cl.floor; {
			next := cl.recs.Next(rec)
			if rec.state != recInProgress {
				t.stats.acked.Add(1)
				t.deleteLocked(rec)
			}
			rec = next
		}
	}
	if h.flags&flagAck == 0 || h.ackSeq < cl.floor {
		return
	}
	rec := t.recs[eoKey{cl.id, h.ackSeq}]
	if rec == nil || rec.state == recInProgress || rec.expect != 0 {
		return
	}
	rec.expect = uint32(h.ackRetries) + 1
	t.stats.acked.Add(1)
	if rec.received >= rec.expect {
		t.deleteLocked(rec)
	} else if rec.state == recCompleted {
		t.tombstoneLocked(rec, time.Now())
	}
}

// complete stores the response of a record's request, if it fits in
// what MaxRecordBytes leaves (counted before it is copied), and reports
// whether it was kept. With store (a large response's storage, which
// holds frame) frame is kept as it is, not copied: the caller hands the
// storage over if it was kept, sends from it, and then calls sent. It
// returns the parked duplicate, to be answered too.
func (t *eoTable) complete(rec *eoRecord, frame, store []byte, now time.Time) (parked *sock.Message, kept bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.updateNextLocked()
	parked = rec.parked
	rec.parked = nil
	if rec.deleted {
		return parked, false
	}
	hs := rec.cl.host
	t.reserved -= recordReserve
	hs.reserved -= recordReserve
	if t.bytes+t.reserved+len(frame) <= t.cfg.MaxRecordBytes && hs.bytes+hs.reserved+len(frame) <= t.cfg.MaxRecordBytesPerHost {
		rec.frame = frame
		if store == nil {
			rec.frame = append([]byte(nil), frame...)
		}
		rec.store, rec.sending = store, store != nil
		t.bytes += len(rec.frame)
		hs.bytes += len(rec.frame)
		kept = true
	} else {
		t.stats.lost.Add(1) // it ran; duplicates learn that, not the response
	}
	rec.state = recCompleted
	t.done.push(rec, now)
	return parked, kept
}

// abandon deletes the record of a request that will not run.
func (t *eoTable) abandon(rec *eoRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.updateNextLocked()
	if !rec.deleted {
		t.deleteLocked(rec)
	}
}

// dropDead forgets the clients whose leases expired, with their
// records, returning the duplicates that were parked on them, to be
// answered.
func (t *eoTable) dropDead() []*sock.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.updateNextLocked()
	var parked []*sock.Message
	for id, cl := range t.clients {
		if !cl.lease.dead.Load() {
			continue
		}
		for rec := cl.recs.Front(); rec != nil; {
			next := cl.recs.Next(rec)
			if rec.parked != nil {
				parked = append(parked, rec.parked)
				rec.parked = nil
			}
			t.deleteLocked(rec)
			rec = next
		}
		delete(t.clients, id)
		if cl.host.clients--; cl.host.clients == 0 {
			delete(t.hosts, cl.lease.host)
		}
	}
	return parked
}

// collect runs the timeouts due by now.
func (t *eoTable) collect(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.updateNextLocked()
	t.collectLocked(now)
}

func (t *eoTable) collectLocked(now time.Time) {
	for rec, at := t.done.front(); rec != nil && !now.Before(at.Add(t.cfg.RecordTimeout)); rec, at = t.done.front() {
		// Unacknowledged: the response goes, the record stays (it ran).
		t.stats.expired.Add(1)
		t.done.remove(rec)
		if rec.frame != nil {
			t.stats.lost.Add(1)
		}
		t.dropFrameLocked(rec)
	}
	for rec, at := t.tombs.front(); rec != nil && !now.Before(at.Add(t.cfg.PacketLifetime)); rec, at = t.tombs.front() {
		t.deleteLocked(rec)
	}
}

// tombstoneLocked drops a completed record's response and keeps the
// record, so that late copies are answered stale, for PacketLifetime.
func (t *eoTable) tombstoneLocked(rec *eoRecord, now time.Time) {
	t.done.remove(rec)
	t.dropFrameLocked(rec)
	rec.state = recTomb
	t.tombs.push(rec, now)
}

func (t *eoTable) deleteLocked(rec *eoRecord) {
	if rec.deleted {
		return
	}
	rec.deleted = true
	delete(t.recs, rec.key)
	rec.cl.recs.remove(rec)
	rec.cl.host.recs--
	t.done.remove(rec)
	t.tombs.remove(rec)
	t.dropFrameLocked(rec)
	if rec.state == recInProgress {
		// Its handler may still hold it: not for reuse.
		t.reserved -= recordReserve
		rec.cl.host.reserved -= recordReserve
		return
	}
	if rec.sending {
		return // EnqueueResponse still holds it: not for reuse
	}
	if len(t.free) < maxFreeRecords {
		*rec = eoRecord{}
		t.free = append(t.free, rec)
	}
}

// maxFreeRecords bounds the deleted records kept for reuse.
const maxFreeRecords = 1024

// updateNextLocked publishes when collect next has work.
func (t *eoTable) updateNextLocked() {
	var next int64
	if rec, at := t.done.front(); rec != nil {
		next = at.Add(t.cfg.RecordTimeout).UnixNano()
	}
	if rec, at := t.tombs.front(); rec != nil {
		if n := at.Add(t.cfg.PacketLifetime).UnixNano(); next == 0 || n < next {
			next = n
		}
	}
	t.next.Store(next)
}

// usage reports the records held, their response bytes and the bytes
// reserved for records in progress.
func (t *eoTable) usage() (records, bytes, reserved int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.recs), t.bytes, t.reserved
}

// dropFrameLocked lets the response of rec go. The storage of a large
// one goes back to the pool, unless EnqueueResponse still sends from it
// (then sent gives it back).
func (t *eoTable) dropFrameLocked(rec *eoRecord) {
	t.bytes -= len(rec.frame)
	rec.cl.host.bytes -= len(rec.frame)
	rec.frame = nil
	if rec.store != nil && !rec.sending {
		t.pool.putBig(rec.store)
		rec.store = nil
	}
}

// sent says that EnqueueResponse no longer reads the storage of rec's
// large response: if the record has let the response go meanwhile, the
// storage goes back to the pool.
func (t *eoTable) sent(rec *eoRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec.sending = false
	if rec.frame == nil && rec.store != nil {
		t.pool.putBig(rec.store)
		rec.store = nil
	}
}
