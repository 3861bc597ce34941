package ack

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// pendingRun is the outcome of ticking a Pending from Start at 0.
type pendingRun struct {
	needAcks []uint64 // ticks of every NeedAck
	reclaim  uint64   // tick of the first Reclaim, 0 if none
}

// schedule ticks a Pending started at 0 through tick limit, calling
// Heard at the ticks in heard and Start again at restart (if non-zero),
// each before that tick's Tick.
func schedule(cfg Config, limit uint64, heard []uint64, restart uint64) pendingRun {
	var p Pending
	var out pendingRun
	p.Start(0)
	for now := uint64(0); now <= limit && out.reclaim == 0; now++ {
		if slices.Contains(heard, now) {
			p.Heard(now)
		}
		if restart != 0 && now == restart {
			p.Start(now)
		}
		if a := p.Tick(now, &cfg); a == NeedAck {
			out.needAcks = append(out.needAcks, now)
		} else if a == Reclaim {
			out.reclaim = now
		}
	}
	return out
}

// ticks lists from, from+step, ... up to and including to.
func ticks(from, step, to uint64) []uint64 {
	var s []uint64
	for t := from; t <= to; t += step {
		s = append(s, t)
	}
	return s
}

func TestPendingSchedule(t *testing.T) {
	custom := Config{RequestAckTicks: 3, NeedAckInterval: 4, ReclaimTicks: 20}
	tests := []struct {
		name    string
		cfg     Config
		heard   []uint64
		restart uint64
		want    pendingRun
	}{
		{"defaults", Config{}, nil, 0, pendingRun{ticks(2, 1, 1999), 2000}},
		{"custom", custom, nil, 0, pendingRun{ticks(3, 4, 19), 20}},
		{"heard postpones reclaim", custom, []uint64{10}, 0, pendingRun{ticks(3, 4, 29), 30}},
		{"heard twice", custom, []uint64{10, 25}, 0, pendingRun{ticks(3, 4, 44), 45}},
		{"start again", custom, nil, 8, pendingRun{append([]uint64{3, 7}, ticks(11, 4, 27)...), 28}},
		{"reclaim before any need", Config{RequestAckTicks: 5, ReclaimTicks: 3}, nil, 0, pendingRun{nil, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := schedule(tc.cfg, 5000, tc.heard, tc.restart)
			if !slices.Equal(got.needAcks, tc.want.needAcks) || got.reclaim != tc.want.reclaim {
				t.Errorf("NeedAck at %v, Reclaim at %d; want %v, %d",
					got.needAcks, got.reclaim, tc.want.needAcks, tc.want.reclaim)
			}
		})
	}
}

func TestPendingReclaimRepeats(t *testing.T) {
	var p Pending
	cfg := Config{ReclaimTicks: 5}
	p.Start(100)
	for now := uint64(105); now < 110; now++ {
		if a := p.Tick(now, &cfg); a != Reclaim {
			t.Fatalf("tick %d: %v, want Reclaim", now, a)
		}
	}
	p.Heard(110)
	if a := p.Tick(110, &cfg); a != NeedAck {
		t.Fatalf("after Heard: %v, want NeedAck", a)
	}
	p.Heard(50) // a stale time never moves the clock back
	if a := p.Tick(114, &cfg); a != NeedAck {
		t.Fatalf("after a stale Heard: %v, want NeedAck", a)
	}
}

func TestConfigDefaults(t *testing.T) {
	want := Config{RequestAckTicks: 2, NeedAckInterval: 1, ReclaimTicks: 2000}
	if got := (Config{NeedAckInterval: -3}).WithDefaults(); got != want {
		t.Errorf("WithDefaults = %+v, want %+v", got, want)
	}
	var a, b Pending
	if a.Due(nil) != b.Due(&Config{}) || a.Tick(2, nil) != b.Tick(2, &want) {
		t.Error("a nil config differs from the defaults")
	}
	if got := ReclaimAtLeast(30); got != 62 {
		t.Errorf("ReclaimAtLeast(30) = %d, want 62", got)
	}
	if got := ReclaimAtLeast(-1); got != 2 {
		t.Errorf("ReclaimAtLeast(-1) = %d, want 2", got)
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{None: "None", NeedAck: "NeedAck", Reclaim: "Reclaim", 7: "Action(7)"} {
		if got := a.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(a), got, want)
		}
	}
}

// TestPendingProperties checks every decision of a Pending, under random
// Start and Heard calls, against the policy stated in terms of the
// ticks of the last Start, Heard and NeedAck.
func TestPendingProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			RequestAckTicks: rapid.IntRange(1, 6).Draw(t, "requestAck"),
			NeedAckInterval: rapid.IntRange(1, 6).Draw(t, "interval"),
			ReclaimTicks:    rapid.IntRange(1, 40).Draw(t, "reclaim"),
		}
		from := rapid.Uint64Range(0, 1<<40).Draw(t, "from")
		var p Pending
		p.Start(from)
		sent, heard := from, from
		var lastNeed uint64
		asked := false
		for now := from; now < from+200; now++ {
			switch rapid.IntRange(0, 19).Draw(t, "event") {
			case 0:
				p.Start(now)
				sent, heard, asked = now, now, false
			case 1, 2:
				p.Heard(now)
				heard = now
			}
			if rapid.IntRange(0, 3).Draw(t, "skip") == 0 {
				continue
			}
			var want Action
			switch {
			case now-heard >= uint64(cfg.ReclaimTicks):
				want = Reclaim
			case now-sent >= uint64(cfg.RequestAckTicks) &&
				(!asked || now-lastNeed >= uint64(cfg.NeedAckInterval)):
				want = NeedAck
				asked, lastNeed = true, now
			}
			due := p.Due(&cfg)
			if got := p.Tick(now, &cfg); got != want || (got == None) != (now < due) {
				t.Fatalf("tick %d: %v (due %d), want %v", now, got, due, want)
			}
		}
	})
}

func TestPendingTickAllocs(t *testing.T) {
	var p Pending
	cfg := Config{ReclaimTicks: 50}
	now := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		if p.Tick(now, &cfg) == Reclaim {
			p.Start(now)
		}
		p.Tick(now, nil)
	})
	if allocs != 0 {
		t.Errorf("Pending.Tick allocates %.1f times per run", allocs)
	}
}

func TestStretch(t *testing.T) {
	if got, want := (Config{}).Stretch(50, 1050), (Config{RequestAckTicks: 50, NeedAckInterval: 50, ReclaimTicks: 2102}); got != want {
		t.Errorf("Stretch(50, 1050) = %+v, want %+v", got, want)
	}
	if got, want := (Config{}).Stretch(1, 30), (Config{}).WithDefaults(); got != want {
		t.Errorf("Stretch below the floors = %+v, want %+v", got, want)
	}
}
