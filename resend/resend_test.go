package resend

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// step is something that happens to a Tracker just before the Tick of
// its tick.
type step struct {
	at   uint64
	kind byte // 's' Start, 'p' Progress, 'a' Alive, 'h' Heard
}

// runSchedule starts a Tracker at from, ticks it every tick, applies the
// steps, and returns the ticks of the Resends and of the first Timeout
// (0 if none by until).
func runSchedule(cfg *Config, from, until uint64, steps []step) (resends []uint64, timeout uint64) {
	var tr Tracker
	tr.Start(from)
	for now := from; now <= until; now++ {
		for _, s := range steps {
			if s.at != now {
				continue
			}
			switch s.kind {
			case 's':
				tr.Start(now)
			case 'p':
				tr.Progress(now)
			case 'a':
				tr.Alive(now)
			case 'h':
				tr.Heard(now)
			}
		}
		switch tr.Tick(now, cfg) {
		case Resend:
			resends = append(resends, now)
		case Timeout:
			return resends, now
		}
	}
	return resends, 0
}

func TestTrackerSchedule(t *testing.T) {
	five := Config{TimeoutResends: 5} // short schedules, with default timing
	tests := []struct {
		name    string
		cfg     Config
		from    uint64
		steps   []step
		resends []uint64
		timeout uint64
	}{
		{name: "defaults", resends: []uint64{5, 10, 15, 20, 25, 30, 35, 40, 45, 50,
			55, 60, 65, 70, 75, 80, 85, 90, 95, 100}, timeout: 105},
		{name: "five resends", cfg: five, resends: []uint64{5, 10, 15, 20, 25}, timeout: 30},
		{name: "five from 1000", cfg: five, from: 1000,
			resends: []uint64{1005, 1010, 1015, 1020, 1025}, timeout: 1030},
		{name: "progress restarts the clock", cfg: five, steps: []step{{7, 'p'}},
			resends: []uint64{5, 12, 17, 22, 27, 32}, timeout: 37},
		{name: "progress before the first resend", cfg: five, steps: []step{{4, 'p'}, {8, 'p'}},
			resends: []uint64{13, 18, 23, 28, 33}, timeout: 38},
		{name: "alive (a BUSY after each RESEND) restarts the clock", cfg: five,
			steps:   []step{{6, 'a'}, {12, 'a'}},
			resends: []uint64{5, 11, 17, 22, 27, 32, 37}, timeout: 42},
		{name: "heard does not restart the clock", cfg: five, steps: []step{{3, 'h'}},
			resends: []uint64{5, 10, 15, 20, 25}, timeout: 30},
		{name: "heard clears unanswered", cfg: five, steps: []step{{26, 'h'}},
			resends: []uint64{5, 10, 15, 20, 25, 30, 35, 40, 45, 50}, timeout: 55},
		{name: "heard at a resend tick", cfg: five, steps: []step{{15, 'h'}},
			resends: []uint64{5, 10, 15, 20, 25, 30, 35}, timeout: 40},
		{name: "start forgets earlier resends", cfg: five, steps: []step{{7, 's'}},
			resends: []uint64{5, 12, 17, 22, 27, 32}, timeout: 37},
		{name: "custom", cfg: Config{ResendTicks: 3, ResendInterval: 2, TimeoutResends: 2},
			resends: []uint64{3, 5}, timeout: 7},
		{name: "one resend", cfg: Config{TimeoutResends: 1},
			resends: []uint64{5}, timeout: 10},
		{name: "every tick", cfg: Config{ResendTicks: 1, ResendInterval: 1, TimeoutResends: 3},
			resends: []uint64{1, 2, 3}, timeout: 4},
		{name: "interval longer than resend ticks",
			cfg:     Config{ResendTicks: 2, ResendInterval: 10, TimeoutResends: 1},
			steps:   []step{{3, 'p'}},
			resends: []uint64{2, 12}, timeout: 22},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resends, timeout := runSchedule(&tc.cfg, tc.from, tc.from+200, tc.steps)
			if !slices.Equal(resends, tc.resends) || timeout != tc.timeout {
				t.Errorf("resends %v, timeout at %d; want %v, timeout at %d",
					resends, timeout, tc.resends, tc.timeout)
			}
		})
	}
}

func TestTimeoutTicksMatchesSchedule(t *testing.T) {
	for _, cfg := range []Config{{}, {ResendTicks: 3, ResendInterval: 2, TimeoutResends: 2}, {ResendTicks: 7}} {
		_, timeout := runSchedule(&cfg, 0, 1000, nil)
		if got := cfg.TimeoutTicks(); uint64(got) != timeout {
			t.Errorf("%+v: TimeoutTicks %d, schedule times out at %d", cfg, got, timeout)
		}
	}
	if got := (Config{}).TimeoutTicks(); got != 105 {
		t.Errorf("default TimeoutTicks = %d, want 105", got)
	}
	// A RESEND just before the last Heard delays the next by a full
	// interval, longer than ResendTicks here: the timeout comes later
	// than ResendTicks + TimeoutResends*ResendInterval after the Heard,
	// but within TimeoutTicks.
	cfg := Config{ResendTicks: 2, ResendInterval: 10, TimeoutResends: 1}
	_, timeout := runSchedule(&cfg, 0, 1000, []step{{3, 'h'}})
	if after := timeout - 3; after <= 2+10 || after > uint64(cfg.TimeoutTicks()) {
		t.Errorf("timeout %d ticks after Heard, want in (12, %d]", after, cfg.TimeoutTicks())
	}
}

func TestTrackerTimeoutSticksUntilHeard(t *testing.T) {
	var tr Tracker
	tr.Start(0)
	cfg := Config{ResendTicks: 1, ResendInterval: 1, TimeoutResends: 1}
	want := []Action{None, Resend, Timeout, Timeout}
	for now, w := range want {
		if got := tr.Tick(uint64(now), &cfg); got != w {
			t.Fatalf("tick %d: %v, want %v", now, got, w)
		}
	}
	if tr.Unanswered() != 1 {
		t.Fatalf("Unanswered = %d, want 1", tr.Unanswered())
	}
	tr.Heard(4)
	if tr.Unanswered() != 0 {
		t.Fatalf("Unanswered after Heard = %d, want 0", tr.Unanswered())
	}
	if got := tr.Tick(4, &cfg); got != Resend {
		t.Fatalf("tick after Heard: %v, want Resend", got)
	}
}

func TestNilConfigMeansDefaults(t *testing.T) {
	var a, b Tracker
	for now := uint64(0); now < 40; now++ {
		if x, y := a.Tick(now, nil), b.Tick(now, &Config{}); x != y {
			t.Fatalf("tick %d: nil config %v, zero config %v", now, x, y)
		}
	}
	if a.Due(nil) != b.Due(&Config{}) {
		t.Fatal("Due differs between nil and zero config")
	}
}

func TestConfigWithDefaults(t *testing.T) {
	got := Config{ResendTicks: -1, ResendInterval: 7}.WithDefaults()
	want := Config{ResendTicks: 5, ResendInterval: 7, TimeoutResends: 20}
	if got != want {
		t.Errorf("WithDefaults = %+v, want %+v", got, want)
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{None: "None", Resend: "Resend", Timeout: "Timeout", 9: "Action(9)"} {
		if got := a.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(a), got, want)
		}
	}
}

// TestTrackerProperties drives a Tracker with random Progress and Heard
// and checks every decision against the policy.
func TestTrackerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			ResendTicks:    rapid.IntRange(1, 6).Draw(t, "resendTicks"),
			ResendInterval: rapid.IntRange(1, 6).Draw(t, "resendInterval"),
			TimeoutResends: rapid.IntRange(1, 4).Draw(t, "timeoutResends"),
		}
		r, i, n := uint64(cfg.ResendTicks), uint64(cfg.ResendInterval), uint64(cfg.TimeoutResends)
		everyTick := rapid.Bool().Draw(t, "everyTick")
		eventPct := rapid.IntRange(0, 25).Draw(t, "eventPct")
		start := rapid.Uint64Range(0, 1<<40).Draw(t, "start")

		var tr Tracker
		tr.Start(start)
		progress, event := start, start // last Start/Progress; last Start/Progress/Heard
		var lastResend uint64
		resent := false
		unanswered := uint64(0)
		for now := start; now < start+300; now++ {
			if rapid.IntRange(0, 99).Draw(t, "event") < eventPct {
				if rapid.Bool().Draw(t, "progress") {
					tr.Progress(now)
					progress = now
				} else {
					tr.Heard(now)
				}
				event, unanswered = now, 0
			}
			if !everyTick && rapid.Bool().Draw(t, "skip") {
				continue
			}
			due := tr.Due(&cfg)
			a := tr.Tick(now, &cfg)
			if (a == None) != (now < due) {
				t.Fatalf("tick %d: %v but Due says %d", now, a, due)
			}
			if a != None {
				if now-progress < r {
					t.Fatalf("tick %d: %v only %d ticks after progress", now, a, now-progress)
				}
				if resent && now-lastResend < i {
					t.Fatalf("tick %d: %v only %d ticks after the last Resend", now, a, now-lastResend)
				}
			}
			switch a {
			case Resend:
				if unanswered >= n {
					t.Fatalf("tick %d: Resend with %d unanswered", now, unanswered)
				}
				unanswered++
				resent, lastResend = true, now
			case Timeout:
				if unanswered != n {
					t.Fatalf("tick %d: Timeout after %d unanswered resends, want %d", now, unanswered, n)
				}
				if now-progress < r+n*i || now-event < n*i {
					t.Fatalf("tick %d: Timeout with progress %d ticks ago, news %d ticks ago",
						now, now-progress, now-event)
				}
			case None:
				if everyTick && now-event >= uint64(cfg.TimeoutTicks()) {
					t.Fatalf("tick %d: no Timeout %d ticks after the last news (TimeoutTicks %d)",
						now, now-event, cfg.TimeoutTicks())
				}
			}
			if uint64(tr.Unanswered()) != unanswered {
				t.Fatalf("tick %d: Unanswered = %d, want %d", now, tr.Unanswered(), unanswered)
			}
		}
	})
}

func TestTickAllocs(t *testing.T) {
	var tr Tracker
	cfg := Config{}
	now := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		if tr.Tick(now, &cfg) == Timeout {
			tr.Heard(now)
		}
		tr.Progress(now)
		tr.Tick(now, nil)
	})
	if allocs != 0 {
		t.Errorf("Tick allocates %.1f times per run", allocs)
	}
}

func BenchmarkTick(b *testing.B) {
	var tr Tracker
	cfg := Config{}
	b.ReportAllocs()
	for n := range b.N {
		if tr.Tick(uint64(n), &cfg) == Timeout {
			tr.Heard(uint64(n))
		}
	}
}
