package grant

import (
	"net/netip"
	"slices"
)

// ID is the engine's handle for an incoming message. It must be unique
// among the messages registered with one Scheduler (wire RPC ids are not:
// two clients may use the same one).
type ID uint64

// Grant is one decision of Decide: send a GRANT for message ID that lets
// its sender transmit every byte below Offset, at Priority.
type Grant struct {
	ID       ID
	Offset   uint32
	Priority uint8
}

// Stats are the Scheduler's counters and current sizes.
type Stats struct {
	// Grants counts the Grant decisions Decide has returned.
	Grants uint64
	// GrantedBytes counts the bytes by which grant offsets were raised,
	// by SRPT and by the FIFO share (unscheduled bytes are not counted).
	GrantedBytes uint64
	// FIFOGrants counts the offset raises made by the FIFO share, and
	// FIFOBytes the bytes they granted (part of GrantedBytes).
	FIFOGrants uint64
	FIFOBytes  uint64
	// FIFODue is the number of FIFO bytes due and not yet granted (at
	// most FIFOIncrement).
	FIFODue int
	// Active is the number of registered messages, Grantable those that
	// still need grants, and Granting the size of the granted set chosen
	// by the last Decide.
	Active    int
	Grantable int
	Granting  int
	// Incoming is the current total incoming, as Incoming returns, and
	// Limit the bound on it in force (MaxIncoming, or what SetLimit set).
	Incoming int
	Limit    int
}

// message is the state of one registered message.
type message struct {
	id   ID
	peer netip.Addr
	seq  uint64 // Add order

	length   uint32
	received uint32
	granted  uint32 // grant offset: unscheduled bytes, then grants

	sentOffset uint32 // the offset the sender knows of
	level      uint8  // priority of the last GRANT
	announced  bool   // a GRANT has been returned for the message
	ranked     bool   // it needs grants: it is in Scheduler.rank and the age list
	inSet      uint64 // Scheduler.epoch of the last Decide that chose it

	older, newer int32 // neighbours in the age list of ranked messages, or -1
}

// remaining is the SRPT rank key: bytes not yet received.
func (m *message) remaining() uint32 { return m.length - m.received }

// incoming is what the message adds to total incoming.
func (m *message) incoming() int64 { return int64(m.granted) - int64(m.received) }

// entry is a message's place in the ranking. The key (remaining, seq) is
// unique, so a message is found again by binary search.
type entry struct {
	remaining uint32
	slot      int32
	seq       uint64
}

// before is the ranking order: fewer remaining bytes first, then older.
func (e entry) before(f entry) bool {
	return e.remaining < f.remaining || e.remaining == f.remaining && e.seq < f.seq
}

// peerCount counts one peer's members while Decide builds the set.
type peerCount struct {
	peer netip.Addr
	n    int
}

// Scheduler is the receiver's grant scheduler. It is not safe for
// concurrent use. See the package documentation for the policy.
type Scheduler struct {
	cfg       Config
	limit     int64 // bound on incoming: cfg.MaxIncoming unless SetLimit changed it
	fifoEvery int64 // SRPT bytes per FIFO increment; 0: FIFO share off

	// ahead ranks messages among other schedulers' (see SetAhead).
	ahead func(remaining uint32) (ahead, active int)

	slots map[ID]int32
	msgs  []message // slab indexed by slot
	free  []int32   // unused slots
	rank  []entry   // messages needing grants, in ranking order
	set   []int32   // the granted set, in ranking order
	peers []peerCount
	paid  []int32 // messages the FIFO share raised in this Decide

	// The messages needing grants also form a list in Add order (slots,
	// -1 for none): the FIFO share's queue.
	oldest, youngest int32

	seq           uint64
	epoch         uint64
	incoming      int64
	srptSinceFIFO int64 // SRPT bytes granted since a FIFO increment fell due
	fifoDue       int64 // FIFO bytes due and not yet granted, <= FIFOIncrement
	stats         Stats
}

// initialSlots is how many messages New makes room for; the tables grow
// beyond it on demand and are reused afterwards.
const initialSlots = 64

// New returns a Scheduler with cfg (unset fields take their defaults).
func New(cfg Config) *Scheduler {
	cfg = cfg.WithDefaults()
	return &Scheduler{
		cfg:       cfg,
		limit:     int64(cfg.MaxIncoming),
		fifoEvery: cfg.fifoEvery(),
		slots:     make(map[ID]int32, initialSlots),
		msgs:      make([]message, 0, initialSlots),
		free:      make([]int32, 0, initialSlots),
		rank:      make([]entry, 0, initialSlots),
		set:       make([]int32, 0, cfg.MaxOvercommit),
		peers:     make([]peerCount, 0, cfg.MaxOvercommit),
		paid:      make([]int32, 0, 4),
		oldest:    -1,
		youngest:  -1,
	}
}

// Config returns the configuration in use, defaults filled in.
func (s *Scheduler) Config() Config { return s.cfg }

// Add registers an incoming message that needs grants (length > unsched)
// from the sending host peer, of which received bytes have arrived. Its
// first min(unsched, length) bytes count as granted. A message with
// length <= unsched never needs grants but its unscheduled bytes count as
// incoming until they arrive or it is removed. Adding an ID that is
// already registered does nothing.
func (s *Scheduler) Add(id ID, peer netip.Addr, length, unsched, received uint32) {
	if _, ok := s.slots[id]; ok {
		return
	}
	received = min(received, length)
	granted := max(min(unsched, length), received)
	s.seq++
	slot := s.alloc()
	s.slots[id] = slot
	m := &s.msgs[slot]
	*m = message{
		id:         id,
		peer:       peer,
		seq:        s.seq,
		length:     length,
		received:   received,
		granted:    granted,
		sentOffset: granted,
	}
	s.incoming += m.incoming()
	if granted < length {
		s.insert(slot)
	}
}

// Received records that received bytes of the message have arrived in
// total (the engine's count, whatever order the packets came in). Smaller
// counts than before are ignored; counts are capped at the length. Bytes
// arriving beyond the grant offset (a misbehaving sender) raise it
// silently. Unknown IDs are ignored.
func (s *Scheduler) Received(id ID, received uint32) {
	slot, ok := s.slots[id]
	if !ok {
		return
	}
	m := &s.msgs[slot]
	received = min(received, m.length)
	if received <= m.received {
		return
	}
	old := s.key(slot)
	before := m.incoming()
	m.received = received
	if received > m.granted {
		m.granted = received
		m.sentOffset = received
	}
	s.incoming += m.incoming() - before
	if !m.ranked {
		return
	}
	i := s.find(old)
	if m.granted == m.length {
		s.dropAt(i)
		return
	}
	// Fewer remaining bytes: the message moves up.
	e := s.key(slot)
	j := s.search(e, i)
	copy(s.rank[j+1:i+1], s.rank[j:i])
	s.rank[j] = e
}

// Remove forgets a message: it completed, was aborted, or its peer timed
// out. Its incoming bytes no longer count. Unknown IDs are ignored.
func (s *Scheduler) Remove(id ID) {
	slot, ok := s.slots[id]
	if !ok {
		return
	}
	m := &s.msgs[slot]
	s.incoming -= m.incoming()
	if m.ranked {
		s.unrank(slot)
	}
	if i := slices.Index(s.set, slot); i >= 0 {
		s.set = slices.Delete(s.set, i, i+1)
	}
	delete(s.slots, id)
	*m = message{}
	s.free = append(s.free, slot)
}

// Decide runs one grant pass and appends to dst a Grant for every message
// whose offset rose, and for every message in the granted set whose
// priority changed while it still has granted bytes outstanding. It
// returns the extended slice; each message appears at most once.
func (s *Scheduler) Decide(dst []Grant) []Grant {
	if len(s.rank) == 0 {
		// No message needs grants: what the full pass would do, cheaply
		// (the common case of small messages, on every packet).
		if s.fifoDue > 0 && s.room() > 0 {
			s.fifoDue = 0
		}
		s.set = s.set[:0]
		return dst
	}
	s.epoch++
	s.paid = s.paid[:0]
	s.payFIFO()
	s.choose()
	s.grantSet()
	s.payFIFO()
	return s.emit(dst)
}

// Granted returns the message's grant offset (unscheduled bytes
// included): the sender may have sent every byte below it. It is 0 for an
// unknown ID.
func (s *Scheduler) Granted(id ID) uint32 {
	if slot, ok := s.slots[id]; ok {
		return s.msgs[slot].granted
	}
	return 0
}

// Priority returns the priority of the last GRANT returned for the
// message, which its sender uses for scheduled bytes (and a RESEND for
// them should carry). ok is false if no GRANT was returned for it yet (or
// the ID is unknown): its bytes so far are unscheduled.
func (s *Scheduler) Priority(id ID) (prio uint8, ok bool) {
	if slot, found := s.slots[id]; found {
		m := &s.msgs[slot]
		return m.level, m.announced
	}
	return 0, false
}

// Incoming returns total incoming: the bytes granted or unscheduled and
// not yet received, over all registered messages.
func (s *Scheduler) Incoming() int { return int(s.incoming) }

// SetLimit replaces the bound on total incoming (initially MaxIncoming)
// from the next Decide on, as a socket split into several schedulers
// lends them parts of one budget. A bound below the current incoming
// grants nothing until enough bytes arrive; nothing granted is taken
// back. The window of each message stays what MaxIncoming makes it: a
// scheduler bounded below MaxIncoming grants its messages as one with
// all of it would, as far as its bound allows. n below 1 counts as 1.
func (s *Scheduler) SetLimit(n int) { s.limit = int64(max(n, 1)) }

// SetAhead makes the priorities of the granted set count the messages
// that other schedulers grant to the same host (the shards of one
// socket): ahead(remaining) returns how many of the others' best
// messages rank before a message of this one with remaining bytes left
// (ahead), and how many others have a message needing grants (active).
// A member of rank r then takes the level of rank r+ahead in a set of
// the set's size plus active: with two schedulers granting one message
// each, the shorter one's grants go at a higher level than the longer
// one's, as one scheduler granting both would place them, where each
// alone would give its own the lowest. nil ranks within this scheduler
// only.
func (s *Scheduler) SetAhead(ahead func(remaining uint32) (ahead, active int)) { s.ahead = ahead }

// Demand returns the total incoming a grant pass now would aim at under
// no bound: the bytes incoming now, plus what it would grant each
// member of the set it would choose (up to its window), plus the FIFO
// bytes due. A lender of bound (SetLimit) lends what Demand asks beyond
// it, not more. It changes nothing the scheduler reports.
func (s *Scheduler) Demand() int {
	if len(s.rank) == 0 {
		return int(s.incoming)
	}
	window := s.window(s.walkSet(nil))
	d := s.incoming + s.fifoDue
	s.walkSet(func(slot int32) { d += max(s.want(slot, window), 0) })
	return int(d)
}

// walkSet calls f for each message choose would put in the granted set
// now, best first, without choosing it, and returns how many there are.
func (s *Scheduler) walkSet(f func(slot int32)) int {
	s.peers = s.peers[:0]
	n := 0
	for _, e := range s.rank {
		if n == s.cfg.MaxOvercommit {
			break
		}
		if !s.admitPeer(s.msgs[e.slot].peer) {
			continue
		}
		n++
		if f != nil {
			f(e.slot)
		}
	}
	return n
}

// window is how far past its received bytes a member of a set of
// members is granted: Config.Window, or a fair share of MaxIncoming.
func (s *Scheduler) window(members int) int64 {
	if s.cfg.Window != 0 {
		return int64(s.cfg.Window)
	}
	return int64(s.cfg.MaxIncoming) / int64(members+1)
}

// want is how many bytes the message in slot lacks to be granted
// window past what it received (at most to its end); <= 0 for none.
func (s *Scheduler) want(slot int32, window int64) int64 {
	m := &s.msgs[slot]
	return min(int64(m.length), int64(m.received)+window) - int64(m.granted)
}

// Limit returns the bound on total incoming in force.
func (s *Scheduler) Limit() int { return int(s.limit) }

// Best returns the remaining bytes (length less bytes received) of the
// best-ranked message that still needs grants, and false when none does.
func (s *Scheduler) Best() (remaining uint32, ok bool) {
	if len(s.rank) == 0 {
		return 0, false
	}
	return s.rank[0].remaining, true
}

// AppendGranting appends to dst the IDs of the granted set chosen by the
// last Decide, best first (less any message removed since), and returns
// the extended slice.
func (s *Scheduler) AppendGranting(dst []ID) []ID {
	for _, slot := range s.set {
		dst = append(dst, s.msgs[slot].id)
	}
	return dst
}

// Stats returns the counters and current sizes.
func (s *Scheduler) Stats() Stats {
	st := s.stats
	st.Active = len(s.slots)
	st.Grantable = len(s.rank)
	st.Granting = len(s.set)
	st.Incoming = int(s.incoming)
	st.Limit = int(s.limit)
	st.FIFODue = int(s.fifoDue)
	return st
}

// alloc returns an unused slot.
func (s *Scheduler) alloc() int32 {
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		return slot
	}
	s.msgs = append(s.msgs, message{})
	return int32(len(s.msgs) - 1)
}

// key returns the ranking entry of the message in slot.
func (s *Scheduler) key(slot int32) entry {
	m := &s.msgs[slot]
	return entry{remaining: m.remaining(), slot: slot, seq: m.seq}
}

// search returns the first index in rank[:hi] whose entry does not come
// before e.
func (s *Scheduler) search(e entry, hi int) int {
	lo := 0
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.rank[mid].before(e) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// find returns the index of e in rank.
func (s *Scheduler) find(e entry) int {
	i := s.search(e, len(s.rank))
	if i == len(s.rank) || s.rank[i].slot != e.slot {
		panic("grant: ranking out of sync")
	}
	return i
}

// insert puts a new message into the ranking and, as the youngest, at
// the end of the age list.
func (s *Scheduler) insert(slot int32) {
	e := s.key(slot)
	i := s.search(e, len(s.rank))
	s.rank = slices.Insert(s.rank, i, e)
	m := &s.msgs[slot]
	m.ranked = true
	m.older, m.newer = s.youngest, -1
	if s.youngest >= 0 {
		s.msgs[s.youngest].newer = slot
	} else {
		s.oldest = slot
	}
	s.youngest = slot
}

// unrank takes the message in slot out of the ranking and the age list.
func (s *Scheduler) unrank(slot int32) { s.dropAt(s.find(s.key(slot))) }

// dropAt takes the message at rank[i] out of the ranking and the age
// list.
func (s *Scheduler) dropAt(i int) {
	slot := s.rank[i].slot
	s.rank = slices.Delete(s.rank, i, i+1)
	m := &s.msgs[slot]
	m.ranked = false
	if m.older >= 0 {
		s.msgs[m.older].newer = m.newer
	} else {
		s.oldest = m.newer
	}
	if m.newer >= 0 {
		s.msgs[m.newer].older = m.older
	} else {
		s.youngest = m.older
	}
	m.older, m.newer = -1, -1
}

// room is how many more bytes may be granted now.
func (s *Scheduler) room() int64 { return s.limit - s.incoming }

// raise grants n more bytes to the message in slot.
func (s *Scheduler) raise(slot int32, n int64) {
	m := &s.msgs[slot]
	m.granted += uint32(n)
	s.incoming += n
	s.stats.GrantedBytes += uint64(n)
	if m.granted == m.length {
		s.unrank(slot)
	}
}

// payFIFO grants the due FIFO bytes to the oldest message needing grants,
// as far as total incoming allows and the message's own incoming stays
// within FIFOIncrement; a message that reaches its length passes the rest
// on to the next oldest. Due bytes no message needs are dropped.
func (s *Scheduler) payFIFO() {
	for s.fifoDue > 0 {
		room := s.room()
		if room <= 0 {
			return
		}
		slot := s.oldest
		if slot < 0 {
			s.fifoDue = 0
			return
		}
		m := &s.msgs[slot]
		n := min(s.fifoDue, room, int64(m.length-m.granted), int64(s.cfg.FIFOIncrement)-m.incoming())
		if n <= 0 {
			return // its sender has not delivered the last FIFO bytes yet
		}
		s.raise(slot, n)
		s.fifoDue -= n
		s.stats.FIFOGrants++
		s.stats.FIFOBytes += uint64(n)
		s.paid = append(s.paid, slot)
	}
}

// choose builds the granted set: the best-ranked messages needing grants,
// at most MaxOvercommit of them and PerPeer from any one peer.
func (s *Scheduler) choose() {
	s.set = s.set[:0]
	s.walkSet(func(slot int32) {
		s.msgs[slot].inSet = s.epoch
		s.set = append(s.set, slot)
	})
}

// admitPeer counts one more member from peer, unless it already has
// PerPeer of them.
func (s *Scheduler) admitPeer(peer netip.Addr) bool {
	if s.cfg.PerPeer >= s.cfg.MaxOvercommit {
		return true
	}
	for i := range s.peers {
		if s.peers[i].peer == peer {
			if s.peers[i].n >= s.cfg.PerPeer {
				return false
			}
			s.peers[i].n++
			return true
		}
	}
	s.peers = append(s.peers, peerCount{peer: peer, n: 1})
	return true
}

// grantSet raises each member of the set, best first, to its window
// within the room left under MaxIncoming, and lets one FIFOIncrement fall
// due for every fifoEvery bytes it granted (at most one is due at a
// time).
func (s *Scheduler) grantSet() {
	window := s.window(len(s.set))
	var granted int64
	for _, slot := range s.set {
		room := s.room()
		if room <= 0 {
			break
		}
		if want := s.want(slot, window); want > 0 {
			n := min(want, room)
			s.raise(slot, n)
			granted += n
		}
	}
	if s.fifoEvery == 0 {
		return
	}
	s.srptSinceFIFO += granted
	k := s.srptSinceFIFO / s.fifoEvery
	if k > 0 {
		s.srptSinceFIFO -= k * s.fifoEvery
		s.fifoDue = int64(s.cfg.FIFOIncrement)
	}
}

// emit appends the Grants of this Decide: set members at their rank's
// level, then messages only the FIFO share raised, at the top scheduled
// level.
func (s *Scheduler) emit(dst []Grant) []Grant {
	levels := min(len(s.set), s.cfg.SchedLevels)
	for r, slot := range s.set {
		level := levels - 1 - r
		if s.ahead != nil {
			// Ranked among the other schedulers' best messages too.
			a, active := s.ahead(s.msgs[slot].remaining())
			level = min(len(s.set)+active, s.cfg.SchedLevels) - 1 - (r + a)
		}
		dst = s.announce(dst, slot, uint8(max(level, 0)))
	}
	for _, slot := range s.paid {
		if s.msgs[slot].inSet != s.epoch {
			dst = s.announce(dst, slot, uint8(s.cfg.SchedLevels-1))
		}
	}
	return dst
}

// announce appends a Grant for the message in slot at level if its offset
// rose, or if its level changed while its sender still has granted bytes
// to deliver.
func (s *Scheduler) announce(dst []Grant, slot int32, level uint8) []Grant {
	m := &s.msgs[slot]
	rose := m.granted > m.sentOffset
	moved := m.announced && level != m.level && m.received < m.granted
	if !rose && !moved {
		return dst
	}
	m.sentOffset = m.granted
	m.level = level
	m.announced = true
	s.stats.Grants++
	return append(dst, Grant{ID: m.id, Offset: m.granted, Priority: level})
}
