package dcsim

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// small is a fabric of 12 hosts in 3 racks with 2 spines.
func small(workload string, load float64) Config {
	return Config{Racks: 3, HostsPerRack: 4, Spines: 2, Workload: workload, Load: load,
		Duration: 2 * time.Millisecond, Seed: 7}
}

func TestHomaEndToEnd(t *testing.T) {
	for _, w := range []string{"w1", "w3", "w4"} {
		r, err := Run(small(w, 0.5), "homa")
		if err != nil {
			t.Fatal(err)
		}
		if r.Messages < 50 || r.Incomplete != 0 || r.Failed != 0 {
			t.Errorf("%s: %d messages, %d incomplete, %d failed RPCs; want >= 50, 0, 0", w, r.Messages, r.Incomplete, r.Failed)
		}
		if r.MinSlowdown < 1 || r.ShortP50 < 1 || r.P99 < r.P50 {
			t.Errorf("%s: slowdown min %.3f, short p50 %.3f, p50 %.3f, p99 %.3f: want min >= 1 and p99 >= p50",
				w, r.MinSlowdown, r.ShortP50, r.P50, r.P99)
		}
		if r.Drops != 0 || r.Resends != 0 {
			t.Errorf("%s: %d drops, %d RESENDs in a lightly loaded fabric with large buffers", w, r.Drops, r.Resends)
		}
		if w == "w4" && r.Grants == 0 {
			t.Errorf("w4: no grants, though messages exceed the unscheduled bytes")
		}
	}
}

// TestIdleSlowdown: one message at a time finishes in the idle time the
// model computes for it, give or take the pacer's margin.
func TestIdleSlowdown(t *testing.T) {
	cfg := small("fixed:100000", 0.01)
	cfg.Duration = 20 * time.Millisecond
	r, err := Run(cfg, "homa")
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages == 0 || r.MinSlowdown < 1 || r.P99 > 1.1 {
		t.Errorf("%d messages, slowdown min %.4f p99 %.4f; want them in [1, 1.1]", r.Messages, r.MinSlowdown, r.P99)
	}
}

func TestDeterministic(t *testing.T) {
	var out [2][]byte
	for i := range out {
		r, err := Run(small("w3", 0.7), "homa")
		if err != nil {
			t.Fatal(err)
		}
		r.WallSeconds, r.EventsPerSec, r.SimPerWall, r.HeapPerHost = 0, 0, 0, 0
		out[i], _ = json.Marshal(r)
	}
	if string(out[0]) != string(out[1]) {
		t.Errorf("two runs with one seed differ:\n%s\n%s", out[0], out[1])
	}
}

// TestHomaRecovers: with tiny switch buffers packets are dropped, and
// the core's RESENDs recover every message.
func TestHomaRecovers(t *testing.T) {
	cfg := small("w4", 0.7)
	cfg.BufferBytes = 20_000
	cfg.Drain = 200 * time.Millisecond // the slowest recovers after about 110 ms (RTT-stretched timers)
	r, err := Run(cfg, "homa")
	if err != nil {
		t.Fatal(err)
	}
	if r.Drops == 0 || r.Resends == 0 || r.Incomplete != 0 || r.Failed != 0 {
		t.Errorf("%d drops, %d RESENDs, %d incomplete, %d failed; want drops recovered", r.Drops, r.Resends, r.Incomplete, r.Failed)
	}
}

// TestResultJSON: the fields the command's --json promises.
func TestResultJSON(t *testing.T) {
	r, err := Run(small("w2", 0.3), "homa")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"proto", "workload", "load", "achieved_load", "messages", "short_p99_slowdown", "sim_seconds", "wall_seconds", "buckets", "layers", "drops", "grants", "resends"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	if m["proto"] != "homa" || m["workload"] != "w2" {
		t.Errorf("proto %v, workload %v", m["proto"], m["workload"])
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{
		{Workload: "w9"}, {Workload: "fixed:0"}, {Load: -1}, {Hosts: 1}, {Racks: 2, Spines: -1, HostsPerRack: 2, Duration: time.Millisecond, Warmup: 2 * time.Millisecond},
	} {
		if _, err := Run(c, "homa"); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
	if _, err := Run(Config{}, "quic"); !errors.Is(err, ErrConfig) {
		t.Errorf("protocol quic: %v, want ErrConfig", err)
	}
}

// TestHomaIncast: bursts of 10 requests to one host at once all arrive,
// reported apart from the workload's messages.
func TestHomaIncast(t *testing.T) {
	cfg := small("w2", 0.3)
	cfg.Incast, cfg.IncastSize, cfg.IncastRate = 10, 50_000, 5000
	r, err := Run(cfg, "homa")
	if err != nil {
		t.Fatal(err)
	}
	if r.Incast == nil || r.Incast.Count < 20 || r.Incomplete != 0 {
		t.Fatalf("incast %+v, %d incomplete; want every burst's requests delivered", r.Incast, r.Incomplete)
	}
	t.Logf("incast: %d requests, slowdown p50 %.2f p99 %.2f", r.Incast.Count, r.Incast.P50, r.Incast.P99)
	// Ten 50 KB requests share one 10 Gbit/s link: the last waits for
	// the nine others, so the p99 is well above 1.
	if r.Incast.P50 < 1 || r.Incast.P99 < 3 {
		t.Errorf("incast slowdown p50 %.2f, p99 %.2f; want >= 1 and >= 3", r.Incast.P50, r.Incast.P99)
	}
}

// TestLoadCarried: at a light load every offered byte arrives within
// the window but the last few microseconds' worth.
func TestLoadCarried(t *testing.T) {
	r, err := Run(small("w2", 0.3), "homa")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("offered %.3f, achieved %.3f, left over %.1f µs per host", r.OfferedLoad, r.AchievedLoad, r.LeftOver*1e6)
	if r.OfferedLoad < 0.2 || r.AchievedLoad < 0.95*r.OfferedLoad || r.LeftOver > 20e-6 {
		t.Errorf("offered %.3f, achieved %.3f, left over %.1f µs per host", r.OfferedLoad, r.AchievedLoad, r.LeftOver*1e6)
	}
}
