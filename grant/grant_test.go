package grant_test

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/homa-go/homa/grant"
)

// host returns a distinct peer address for i.
func host(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }

// msg describes a message to Add: id, peer index, length, unscheduled and
// received bytes.
type msg struct {
	id                        grant.ID
	peer                      int
	length, unsched, received uint32
}

func addAll(s *grant.Scheduler, ms []msg) {
	for _, m := range ms {
		s.Add(m.id, host(m.peer), m.length, m.unsched, m.received)
	}
}

// decide runs Decide and returns its grants by ID, failing on a repeated
// ID or an offset that disagrees with Granted.
func decide(t *testing.T, s *grant.Scheduler) map[grant.ID]grant.Grant {
	t.Helper()
	out := map[grant.ID]grant.Grant{}
	for _, g := range s.Decide(nil) {
		if _, dup := out[g.ID]; dup {
			t.Fatalf("two grants for %d in one Decide", g.ID)
		}
		if got := s.Granted(g.ID); got != g.Offset {
			t.Fatalf("grant %+v but Granted = %d", g, got)
		}
		out[g.ID] = g
	}
	return out
}

func granting(s *grant.Scheduler) []grant.ID { return s.AppendGranting(nil) }

func TestWithDefaults(t *testing.T) {
	got := grant.Config{}.WithDefaults()
	want := grant.Config{MaxOvercommit: 8, MaxIncoming: 400_000, PerPeer: 1, FIFOPerMille: 50, FIFOIncrement: 50_000, SchedLevels: 4}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	got = grant.Config{Window: -3, FIFOPerMille: -7, SchedLevels: 20}.WithDefaults()
	if got.Window != 0 || got.FIFOPerMille != -1 || got.SchedLevels != grant.MaxLevels {
		t.Errorf("clamping: %+v", got)
	}
	if got := (grant.Config{FIFOPerMille: 5000}).WithDefaults().FIFOPerMille; got != 1000 {
		t.Errorf("FIFOPerMille 5000 became %d, want 1000", got)
	}
}

// TestWindow checks the grant offsets after one Decide.
func TestWindow(t *testing.T) {
	three := []msg{
		{1, 1, 1_000_000, 40_000, 40_000},
		{2, 2, 2_000_000, 40_000, 40_000},
		{3, 3, 3_000_000, 40_000, 40_000},
	}
	tests := []struct {
		name         string
		cfg          grant.Config
		msgs         []msg
		want         []uint32 // Granted, by position in msgs
		wantIncoming int
	}{
		{"one message: MaxIncoming/2", grant.Config{},
			[]msg{{1, 1, 1_000_000, 40_000, 40_000}}, []uint32{240_000}, 200_000},
		{"window counts from received", grant.Config{},
			[]msg{{1, 1, 1_000_000, 40_000, 10_000}}, []uint32{210_000}, 200_000},
		{"three messages: MaxIncoming/4", grant.Config{},
			three, []uint32{140_000, 140_000, 140_000}, 300_000},
		{"fixed window", grant.Config{Window: 30_000},
			three, []uint32{70_000, 70_000, 70_000}, 90_000},
		{"never past the length", grant.Config{},
			[]msg{{1, 1, 100_000, 40_000, 40_000}}, []uint32{100_000}, 60_000},
		{"best ranked takes the room first", grant.Config{MaxIncoming: 100_000, Window: 60_000},
			three, []uint32{100_000, 80_000, 40_000}, 100_000},
		{"unscheduled bytes take room", grant.Config{MaxIncoming: 100_000},
			[]msg{{1, 1, 1_000_000, 40_000, 40_000}, {2, 2, 30_000, 40_000, 0}, {3, 3, 30_000, 40_000, 0}},
			[]uint32{80_000, 30_000, 30_000}, 100_000},
		{"unscheduled beyond MaxIncoming: no grants", grant.Config{MaxIncoming: 50_000},
			[]msg{{1, 1, 1_000_000, 40_000, 40_000}, {2, 2, 30_000, 40_000, 0}, {3, 3, 30_000, 40_000, 0}},
			[]uint32{40_000, 30_000, 30_000}, 60_000},
		{"unscheduled part not yet arrived", grant.Config{MaxIncoming: 100_000, Window: 100_000},
			[]msg{{1, 1, 1_000_000, 40_000, 1_000}}, []uint32{101_000}, 100_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := grant.New(tt.cfg)
			addAll(s, tt.msgs)
			decide(t, s)
			for i, m := range tt.msgs {
				if got := s.Granted(m.id); got != tt.want[i] {
					t.Errorf("message %d: granted %d, want %d", m.id, got, tt.want[i])
				}
			}
			if got := s.Incoming(); got != tt.wantIncoming {
				t.Errorf("incoming %d, want %d", got, tt.wantIncoming)
			}
		})
	}
}

// TestWindowFollowsReceived: the offset moves with the bytes received and
// a second Decide with no progress grants nothing.
func TestWindowFollowsReceived(t *testing.T) {
	s := grant.New(grant.Config{Window: 50_000})
	s.Add(1, host(1), 500_000, 40_000, 40_000)
	if g := decide(t, s); g[1].Offset != 90_000 {
		t.Fatalf("first grant %+v, want offset 90000", g)
	}
	if g := decide(t, s); len(g) != 0 {
		t.Fatalf("no progress, yet grants %+v", g)
	}
	s.Received(1, 60_000)
	if g := decide(t, s); g[1].Offset != 110_000 {
		t.Fatalf("after 60000 received: %+v, want offset 110000", g)
	}
	s.Received(1, 50_000) // stale count: ignored
	if g := decide(t, s); len(g) != 0 {
		t.Fatalf("stale count produced grants %+v", g)
	}
	s.Received(1, 470_000)
	if g := decide(t, s); g[1].Offset != 500_000 {
		t.Fatalf("near the end: %+v, want offset 500000", g)
	}
	if st := s.Stats(); st.Grantable != 0 || st.Active != 1 || st.Incoming != 30_000 {
		t.Fatalf("fully granted message: %+v", st)
	}
}

func TestPerPeer(t *testing.T) {
	ms := []msg{
		{1, 1, 100_000, 10_000, 10_000},
		{2, 1, 200_000, 10_000, 10_000},
		{3, 1, 300_000, 10_000, 10_000},
		{4, 2, 400_000, 10_000, 10_000},
		{5, 3, 500_000, 10_000, 10_000},
	}
	tests := []struct {
		perPeer int
		want    []grant.ID
	}{
		{0, []grant.ID{1, 4, 5}}, // default: one per peer
		{1, []grant.ID{1, 4, 5}},
		{2, []grant.ID{1, 2, 4, 5}},
		{8, []grant.ID{1, 2, 3, 4, 5}},
	}
	for _, tt := range tests {
		s := grant.New(grant.Config{PerPeer: tt.perPeer})
		addAll(s, ms)
		got := decide(t, s)
		if set := granting(s); !slices.Equal(set, tt.want) {
			t.Errorf("PerPeer %d: set %v, want %v", tt.perPeer, set, tt.want)
		}
		for _, m := range ms {
			if _, ok := got[m.id]; ok != slices.Contains(tt.want, m.id) {
				t.Errorf("PerPeer %d: message %d granted: %v", tt.perPeer, m.id, ok)
			}
		}
	}
	// Once the first message of peer 1 is fully granted, the next takes
	// its place.
	s := grant.New(grant.Config{})
	addAll(s, ms)
	decide(t, s)
	s.Received(1, 100_000)
	s.Remove(1)
	decide(t, s)
	if set := granting(s); !slices.Equal(set, []grant.ID{2, 4, 5}) {
		t.Errorf("after message 1 completes: set %v, want [2 4 5]", set)
	}
}

func TestOvercommit(t *testing.T) {
	var ms []msg
	for i := range 10 {
		// Longest first, so ranking is not Add order.
		ms = append(ms, msg{grant.ID(i + 1), i, uint32(1_000_000 - 10_000*i), 10_000, 10_000})
	}
	for _, k := range []int{0, 1, 3, 8, 12} {
		s := grant.New(grant.Config{MaxOvercommit: k})
		addAll(s, ms)
		got := decide(t, s)
		n := k
		if n == 0 {
			n = grant.DefaultMaxOvercommit
		}
		n = min(n, len(ms))
		var want []grant.ID
		for i := range n {
			want = append(want, grant.ID(10-i))
		}
		if set := granting(s); !slices.Equal(set, want) {
			t.Errorf("MaxOvercommit %d: set %v, want %v", k, set, want)
		}
		if len(got) != n {
			t.Errorf("MaxOvercommit %d: %d grants, want %d", k, len(got), n)
		}
		if st := s.Stats(); st.Granting != n || st.Grantable != len(ms) || st.Grants != uint64(n) {
			t.Errorf("MaxOvercommit %d: stats %+v", k, st)
		}
	}
}

// TestPriorityMapping checks the draft's rule for M granted messages and
// S scheduled levels.
func TestPriorityMapping(t *testing.T) {
	tests := []struct {
		name string
		m, s int
		want []uint8 // by rank
	}{
		{"M=1 < S", 1, 4, []uint8{0}},
		{"M=2 < S: the lowest levels", 2, 4, []uint8{1, 0}},
		{"M=3 < S", 3, 4, []uint8{2, 1, 0}},
		{"M == S", 4, 4, []uint8{3, 2, 1, 0}},
		{"M > S: the rest share level 0", 7, 4, []uint8{3, 2, 1, 0, 0, 0, 0}},
		{"one level", 3, 1, []uint8{0, 0, 0}},
		{"eight levels, M > S", 8, 2, []uint8{1, 0, 0, 0, 0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := grant.New(grant.Config{MaxOvercommit: tt.m, SchedLevels: tt.s})
			for i := range tt.m {
				// Add order opposite to rank.
				s.Add(grant.ID(i), host(i), uint32(900_000-1000*i), 10_000, 10_000)
			}
			got := decide(t, s)
			set := granting(s)
			if len(set) != tt.m {
				t.Fatalf("set %v, want %d members", set, tt.m)
			}
			for r, id := range set {
				if got[id].Priority != tt.want[r] {
					t.Errorf("rank %d (message %d): priority %d, want %d", r, id, got[id].Priority, tt.want[r])
				}
				if p, ok := s.Priority(id); !ok || p != tt.want[r] {
					t.Errorf("rank %d: Priority() = %d, %v", r, p, ok)
				}
			}
		})
	}
}

// TestPreemption: a new shorter message takes the place, the room and the
// top level at the very next Decide.
func TestPreemption(t *testing.T) {
	t.Run("single slot", func(t *testing.T) {
		s := grant.New(grant.Config{MaxOvercommit: 1})
		s.Add(1, host(1), 1_000_000, 40_000, 40_000)
		decide(t, s)
		s.Add(2, host(2), 300_000, 40_000, 40_000)
		got := decide(t, s)
		if _, ok := got[1]; ok || len(got) != 1 {
			t.Fatalf("grants %+v, want only message 2", got)
		}
		if set := granting(s); !slices.Equal(set, []grant.ID{2}) {
			t.Fatalf("set %v, want [2]", set)
		}
	})
	t.Run("room and level", func(t *testing.T) {
		s := grant.New(grant.Config{MaxIncoming: 200_000, Window: 150_000})
		s.Add(1, host(1), 1_000_000, 40_000, 40_000)
		first := decide(t, s)
		if first[1].Offset != 190_000 || first[1].Priority != 0 {
			t.Fatalf("first grant %+v", first)
		}
		s.Received(1, 100_000)
		// A shorter message: its 40,000 unscheduled bytes are all in.
		s.Add(2, host(2), 200_000, 40_000, 40_000)
		got := decide(t, s)
		// 90,000 outstanding for 1 leaves 110,000: all to message 2.
		if g := got[2]; g.Offset != 150_000 || g.Priority != 1 {
			t.Errorf("new message: %+v, want offset 150000 at priority 1", g)
		}
		// Below the new best, the old message keeps level 0: no GRANT.
		if g, ok := got[1]; ok {
			t.Errorf("old message: %+v, want nothing", g)
		}
		if p, _ := s.Priority(1); p != 0 {
			t.Errorf("old message at priority %d, want 0", p)
		}
		if set := granting(s); !slices.Equal(set, []grant.ID{2, 1}) {
			t.Errorf("set %v, want [2 1]", set)
		}
	})
	t.Run("demotion is announced", func(t *testing.T) {
		s := grant.New(grant.Config{SchedLevels: 2, Window: 50_000})
		s.Add(1, host(1), 500_000, 40_000, 40_000)
		s.Add(2, host(2), 900_000, 40_000, 40_000)
		decide(t, s) // 1 at level 1, 2 at level 0
		s.Add(3, host(3), 100_000, 40_000, 40_000)
		got := decide(t, s) // 3 takes level 1; 1 joins 2 at level 0
		want := map[grant.ID]grant.Grant{3: {ID: 3, Offset: 90_000, Priority: 1}, 1: {ID: 1, Offset: 90_000, Priority: 0}}
		if !maps.Equal(got, want) {
			t.Errorf("grants %+v, want %+v", got, want)
		}
	})
	t.Run("remaining bytes, not length", func(t *testing.T) {
		s := grant.New(grant.Config{MaxOvercommit: 1})
		s.Add(1, host(1), 1_000_000, 40_000, 40_000)
		s.Add(2, host(2), 500_000, 40_000, 40_000)
		decide(t, s)
		s.Received(1, 600_000) // 400,000 left, fewer than message 2's 460,000
		decide(t, s)
		if set := granting(s); !slices.Equal(set, []grant.ID{1}) {
			t.Errorf("set %v, want [1]", set)
		}
	})
}

// TestLevelChange: when a member leaves, those ranked above it move down
// a level; the change alone is announced only while the sender still has
// granted bytes to send.
func TestLevelChange(t *testing.T) {
	s := grant.New(grant.Config{MaxIncoming: 30_000, Window: 10_000})
	s.Add(1, host(1), 1_000_000, 40_000, 40_000)
	s.Add(2, host(2), 2_000_000, 40_000, 40_000)
	s.Add(3, host(3), 3_000_000, 40_000, 40_000)
	got := decide(t, s)
	for id, want := range map[grant.ID]uint8{1: 2, 2: 1, 3: 0} {
		if g := got[id]; g.Offset != 50_000 || g.Priority != want {
			t.Fatalf("message %d: %+v, want offset 50000 at %d", id, g, want)
		}
	}
	s.Remove(3)
	s.Received(2, 50_000)                // 2 has nothing outstanding
	s.Add(4, host(4), 20_000, 20_000, 0) // fills the room: no offset can rise
	got = decide(t, s)
	if len(got) != 1 || got[1] != (grant.Grant{ID: 1, Offset: 50_000, Priority: 1}) {
		t.Fatalf("grants %+v, want only message 1's new level", got)
	}
	if p, _ := s.Priority(2); p != 1 {
		t.Errorf("Priority(2) = %d, want the last announced level 1", p)
	}
}

// TestFIFOShare follows the FIFO rule byte by byte with one grant slot.
func TestFIFOShare(t *testing.T) {
	cfg := grant.Config{MaxOvercommit: 1, MaxIncoming: 1_000_000, Window: 100_000, FIFOPerMille: 100, FIFOIncrement: 10_000}
	// 10,000 FIFO bytes per 90,000 SRPT bytes.
	s := grant.New(cfg)
	s.Add(1, host(1), 500_000, 0, 0) // the oldest, always outranked
	s.Add(2, host(2), 400_000, 0, 0)
	got := decide(t, s) // 100,000 SRPT bytes to 2: one increment due and paid
	if g := got[2]; g.Offset != 100_000 || g.Priority != 0 {
		t.Fatalf("SRPT grant %+v", g)
	}
	if g := got[1]; g.Offset != 10_000 || int(g.Priority) != cfg.WithDefaults().SchedLevels-1 {
		t.Fatalf("FIFO grant %+v, want 10000 at the top scheduled level", g)
	}
	st := s.Stats()
	if st.FIFOGrants != 1 || st.FIFOBytes != 10_000 || st.GrantedBytes != 110_000 || st.Grants != 2 || st.FIFODue != 0 {
		t.Fatalf("stats %+v", st)
	}
	s.Received(1, 10_000)
	// 70,000 more SRPT bytes: 80,000 since the increment fell due, so
	// none due yet.
	s.Received(2, 70_000)
	got = decide(t, s)
	if _, ok := got[1]; ok || got[2].Offset != 170_000 {
		t.Fatalf("grants %+v, want only 2 up to 170000", got)
	}
	// 20,000 more: 100,000, so one more increment.
	s.Received(2, 90_000)
	got = decide(t, s)
	if got[2].Offset != 190_000 || got[1].Offset != 20_000 {
		t.Fatalf("grants %+v, want 2 to 190000 and FIFO 1 to 20000", got)
	}
	if set := granting(s); !slices.Equal(set, []grant.ID{2}) {
		t.Fatalf("set %v, want [2]", set)
	}
}

// TestFIFOWaits: due FIFO bytes wait for room and then go first, ahead
// of SRPT; while the oldest sender has not delivered the last FIFO bytes
// they wait for it (SRPT goes on), and no more than one increment is due.
func TestFIFOWaits(t *testing.T) {
	s := grant.New(grant.Config{MaxOvercommit: 1, MaxIncoming: 50_000, Window: 50_000, FIFOPerMille: 500, FIFOIncrement: 20_000})
	// 20,000 FIFO bytes per 20,000 SRPT bytes.
	s.Add(1, host(1), 900_000, 0, 0)
	s.Add(2, host(2), 800_000, 0, 0)
	steps := []struct {
		name    string
		deliver map[grant.ID]uint32
		want    map[grant.ID]uint32 // offsets granted
		wantDue int
	}{
		{"SRPT fills the room; the FIFO bytes wait", nil, map[grant.ID]uint32{2: 50_000}, 20_000},
		{"FIFO first, SRPT gets the rest", map[grant.ID]uint32{2: 30_000}, map[grant.ID]uint32{1: 20_000, 2: 60_000}, 20_000},
		{"no room after FIFO: no SRPT", map[grant.ID]uint32{1: 20_000}, map[grant.ID]uint32{1: 40_000}, 0},
		{"oldest has 20,000 outstanding: SRPT goes on", map[grant.ID]uint32{2: 60_000}, map[grant.ID]uint32{2: 90_000}, 20_000},
		{"still outstanding: one increment due, not two", map[grant.ID]uint32{2: 90_000}, map[grant.ID]uint32{2: 120_000}, 20_000},
		{"delivered: paid", map[grant.ID]uint32{1: 40_000}, map[grant.ID]uint32{1: 60_000}, 0},
	}
	for _, st := range steps {
		for id, n := range st.deliver {
			s.Received(id, n)
		}
		got := decide(t, s)
		if len(got) != len(st.want) {
			t.Fatalf("%s: grants %+v, want offsets %v", st.name, got, st.want)
		}
		for id, off := range st.want {
			if got[id].Offset != off {
				t.Fatalf("%s: grants %+v, want offsets %v", st.name, got, st.want)
			}
		}
		if due := s.Stats().FIFODue; due != st.wantDue {
			t.Fatalf("%s: %d FIFO bytes due, want %d", st.name, due, st.wantDue)
		}
	}
}

// TestFIFOSkipsFullyGranted: the due bytes go past a message that reaches
// its length to the next oldest; what nobody needs is dropped.
func TestFIFOSkipsFullyGranted(t *testing.T) {
	s := grant.New(grant.Config{MaxOvercommit: 1, MaxIncoming: 1_000_000, Window: 90_000, FIFOPerMille: 500, FIFOIncrement: 100_000})
	// 100,000 FIFO bytes per 100,000 SRPT bytes.
	s.Add(1, host(1), 100_000, 50_000, 0) // oldest: 50,000 to grant
	s.Add(2, host(2), 100_000, 70_000, 0) // next: 30,000 to grant
	s.Add(3, host(3), 45_000, 0, 0)       // shortest remaining: the set
	got := decide(t, s)                   // 45,000 SRPT: nothing due yet
	if len(got) != 1 || got[3].Offset != 45_000 {
		t.Fatalf("grants %+v", got)
	}
	s.Add(4, host(4), 60_000, 0, 0)
	got = decide(t, s) // 60,000 more SRPT: 100,000 due, 80,000 needed
	if len(got) != 3 || got[4].Offset != 60_000 || got[1].Offset != 100_000 || got[2].Offset != 100_000 {
		t.Fatalf("grants %+v", got)
	}
	if st := s.Stats(); st.FIFOBytes != 80_000 || st.FIFOGrants != 2 || st.Grantable != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Had the 20,000 left over been kept, they would go to the next
	// message first.
	s.Add(5, host(5), 1_000_000, 0, 0)
	got = decide(t, s) // 90,000 SRPT: 95,000 since the last increment
	if got[5].Offset != 90_000 || s.Stats().FIFOBytes != 80_000 {
		t.Fatalf("grants %+v, stats %+v", got, s.Stats())
	}
}

// TestFIFOStarvation: one grant slot and an endless run of short
// messages from another peer. Without the FIFO share the old message gets
// nothing; with it, it gets its increments.
func TestFIFOStarvation(t *testing.T) {
	for _, tt := range []struct {
		perMille int
		want     uint32
	}{
		{-1, 0},
		// 200 messages of 50,000: 10,000,000 SRPT bytes, 10 increments.
		{0, 10 * 50_000},
	} {
		s := grant.New(grant.Config{MaxOvercommit: 1, FIFOPerMille: tt.perMille})
		s.Add(1, host(1), 1_000_000, 0, 0)
		for i := range 200 {
			id := grant.ID(100 + i)
			s.Add(id, host(2), 50_000, 0, 0)
			decide(t, s)
			s.Received(id, 50_000)
			s.Remove(id)
			s.Received(1, s.Granted(1))
		}
		if got := s.Granted(1); got != tt.want {
			t.Errorf("FIFOPerMille %d: the oldest message got %d bytes, want %d", tt.perMille, got, tt.want)
		}
	}
}

// TestEdges covers unknown IDs, repeated Adds, short messages and
// senders that overrun their grant.
func TestEdges(t *testing.T) {
	s := grant.New(grant.Config{})
	s.Received(9, 100)
	s.Remove(9)
	if s.Granted(9) != 0 {
		t.Error("unknown message has a grant")
	}
	if _, ok := s.Priority(9); ok {
		t.Error("unknown message has a priority")
	}

	s.Add(1, host(1), 30_000, 40_000, 1_000) // short: never needs grants
	s.Add(1, host(2), 900_000, 0, 0)         // repeated ID: ignored
	if s.Granted(1) != 30_000 || s.Incoming() != 29_000 {
		t.Fatalf("short message: granted %d, incoming %d", s.Granted(1), s.Incoming())
	}
	if got := decide(t, s); len(got) != 0 {
		t.Fatalf("grants for a message that needs none: %+v", got)
	}

	s.Add(2, host(2), 100_000, 10_000, 0)
	s.Received(2, 60_000) // beyond the offset: raises it silently
	if s.Granted(2) != 60_000 || s.Incoming() != 29_000 {
		t.Fatalf("overrun: granted %d, incoming %d", s.Granted(2), s.Incoming())
	}
	got := decide(t, s)
	if got[2].Offset != 100_000 {
		t.Fatalf("grants %+v", got)
	}
	s.Received(2, 200_000) // capped at the length
	if s.Granted(2) != 100_000 || s.Incoming() != 29_000 {
		t.Fatalf("capped count: granted %d, incoming %d", s.Granted(2), s.Incoming())
	}
	s.Remove(2)
	s.Remove(1)
	if st := s.Stats(); st.Incoming != 0 || st.Active != 0 || st.Grantable != 0 || st.Granting != 0 {
		t.Fatalf("empty scheduler: %+v", st)
	}
	if got := decide(t, s); len(got) != 0 {
		t.Fatalf("grants from an empty scheduler: %+v", got)
	}

	// An overrun is not announced back to the sender: no room, no GRANT.
	s = grant.New(grant.Config{MaxIncoming: 10_000})
	s.Add(1, host(1), 100_000, 10_000, 0)
	s.Add(2, host(2), 10_000, 10_000, 0)
	s.Received(1, 30_000)
	if got := decide(t, s); len(got) != 0 || s.Granted(1) != 30_000 {
		t.Fatalf("grants %+v after an overrun, granted %d", got, s.Granted(1))
	}
	s.Received(1, 100_000) // overrun to the end: needs no more grants
	decide(t, s)
	if st := s.Stats(); st.Grantable != 0 || st.Granting != 0 || s.Granted(1) != 100_000 {
		t.Fatalf("after an overrun to the end: granted %d, %+v", s.Granted(1), st)
	}
}

func TestSetLimit(t *testing.T) {
	s := grant.New(grant.Config{MaxIncoming: 100_000, Window: 1 << 30, FIFOPerMille: -1})
	if _, ok := s.Best(); ok {
		t.Fatal("Best of an empty scheduler is ok")
	}
	addAll(s, []msg{{id: 1, length: 1_000_000, unsched: 10_000}})
	if rem, ok := s.Best(); !ok || rem != 1_000_000 {
		t.Fatalf("Best = %d, %v; want 1000000, true", rem, ok)
	}
	decide(t, s)
	if got := s.Granted(1); got != 100_000 {
		t.Fatalf("granted %d under MaxIncoming 100000", got)
	}
	s.SetLimit(300_000)
	decide(t, s)
	if got, st := s.Granted(1), s.Stats(); got != 300_000 || st.Limit != 300_000 || st.Incoming != 300_000 {
		t.Fatalf("after SetLimit(300000): granted %d, stats %+v", got, st)
	}
	// A bound below incoming takes nothing back and grants nothing
	// until the bytes above it have arrived.
	s.SetLimit(50_000)
	s.Received(1, 200_000)
	if g := decide(t, s); len(g) != 0 {
		t.Fatalf("grants %v with incoming 100000 over limit 50000", g)
	}
	s.Received(1, 260_000)
	decide(t, s)
	if got := s.Granted(1); got != 310_000 {
		t.Fatalf("granted %d, want received 260000 + limit 50000", got)
	}
	if rem, _ := s.Best(); rem != 740_000 {
		t.Fatalf("Best = %d, want 740000", rem)
	}
}

// TestSetAhead: a scheduler told of another's messages ranks its own
// among them: alone in its set, its message takes the higher of two
// levels when the other's best is longer, the lower when shorter.
func TestSetAhead(t *testing.T) {
	for _, tc := range []struct {
		other uint32 // the other scheduler's best, 0 for none
		want  uint8
	}{{0, 0}, {2_000_000, 1}, {500_000, 0}} {
		s := grant.New(grant.Config{FIFOPerMille: -1})
		s.SetAhead(func(remaining uint32) (ahead, active int) {
			if tc.other == 0 {
				return 0, 0
			}
			if tc.other < remaining {
				return 1, 1
			}
			return 0, 1
		})
		addAll(s, []msg{{id: 1, length: 1_000_000, unsched: 10_000}})
		g := decide(t, s)[1]
		if g.Priority != tc.want {
			t.Errorf("the other's best %d: priority %d, want %d", tc.other, g.Priority, tc.want)
		}
	}
}

// TestDemand: Demand is what a pass would have incoming under no bound
// (each member of the set to its window), and asking it changes nothing.
func TestDemand(t *testing.T) {
	s := grant.New(grant.Config{MaxIncoming: 100_000, Window: 30_000, FIFOPerMille: -1})
	if got := s.Demand(); got != 0 {
		t.Fatalf("an empty scheduler demands %d", got)
	}
	addAll(s, []msg{
		{id: 1, peer: 1, length: 1_000_000, unsched: 10_000},
		{id: 2, peer: 2, length: 25_000, unsched: 10_000},
		{id: 3, peer: 2, length: 500_000, unsched: 10_000}, // its peer has a member already
	})
	// Incoming 30,000 (unscheduled); message 1 up to 30,000 (+20,000),
	// message 2 to its length (+15,000); message 3 waits for its peer.
	if got := s.Demand(); got != 65_000 {
		t.Fatalf("Demand = %d, want 65000", got)
	}
	if g := granting(s); len(g) != 0 {
		t.Fatalf("Demand chose a set: %v", g)
	}
	s.SetLimit(1 << 30)
	decide(t, s)
	if got := s.Incoming(); got != 65_000 {
		t.Fatalf("a pass under no bound left %d incoming, Demand said 65000", got)
	}
}
