package bench

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRounds: with Config.Rounds the protocols run in turn, round by
// round, each round a share of Count; each row is all its rounds (the
// RPCs, the socket counts of every round's sockets) with each round's
// rate, the rows over TCP's get each round's ratio, and the report
// prints them.
func TestRounds(t *testing.T) {
	var protos []Protocol
	for _, name := range []string{"homa-udp", "tcp"} {
		p, _ := LookupProtocol(name)
		protos = append(protos, p)
	}
	var order []string
	roundStarted = func(round int, p string) { order = append(order, strings.Repeat("+", round)+p) }
	t.Cleanup(func() { roundStarted = nil })
	cfg := &Config{Mode: Latency, Protocols: protos, Host: netip.MustParseAddr("127.0.0.1"), InProcess: true,
		Size: 64, Count: 30, Warmup: 5, Rounds: 3, Stats: true, Timeout: time.Minute}
	var stderr strings.Builder
	rep, err := Run(context.Background(), cfg, &stderr)
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, stderr.String())
	}
	if want := []string{"homa-udp", "tcp", "+homa-udp", "+tcp", "++homa-udp", "++tcp"}; !slices.Equal(order, want) {
		t.Errorf("runs %q, want %q", order, want)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("results %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Count != 30 || r.Failed != 0 || len(r.RoundRates) != 3 || slices.Contains(r.RoundRates, 0) {
			t.Errorf("%s: %d RPCs, %d failed, rates by round %v; want 30, 0, three", r.Protocol, r.Count, r.Failed, r.RoundRates)
		}
	}
	homa := rep.Results[0]
	if s := homa.ClientStats; s == nil || s.Sockets != 3 || homa.StatsRPCs != 45 || s.Sent["DATA"] < 45 {
		t.Errorf("homa-udp's stats over three rounds: %+v for %d RPCs; want 3 sockets, 45 RPCs, a DATA each", s, homa.StatsRPCs)
	}
	if len(homa.RoundRatesVsTCP) != 3 || homa.RoundRatesVsTCP[1] != homa.RoundRates[1]/rep.Results[1].RoundRates[1] {
		t.Errorf("homa-udp over tcp by round %v, rates %v and %v", homa.RoundRatesVsTCP, homa.RoundRates, rep.Results[1].RoundRates)
	}
	var out strings.Builder
	if err := rep.Write(&out, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "by round (RPCs/s; over the TCP baseline's of the same round):\n  homa-udp") ||
		!strings.Contains(out.String(), "(median ") {
		t.Errorf("report without the rounds:\n%s", out.String())
	}
}

// TestSocketStatsJoin: joining two runs' counts adds every field, maps
// key by key, and the first run's maps are the sum's own.
func TestSocketStatsJoin(t *testing.T) {
	one := func() *SocketStats {
		s := &SocketStats{}
		v := reflect.ValueOf(s).Elem()
		for i := range v.NumField() {
			switch f := v.Field(i); f.Kind() {
			case reflect.Int:
				f.SetInt(1)
			case reflect.Uint64:
				f.SetUint(1)
			case reflect.Map:
				f.Set(reflect.ValueOf(map[string]uint64{"DATA": 1}))
			}
		}
		return s
	}
	first := one()
	sum := (*SocketStats)(nil).join(first).join(one())
	sum.join(nil)
	v := reflect.ValueOf(sum).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Int, reflect.Uint64:
			if f.Convert(reflect.TypeFor[uint64]()).Uint() != 2 {
				t.Errorf("%s = %v, want 2", name, f)
			}
		case reflect.Map:
			if n := f.Interface().(map[string]uint64)["DATA"]; n != 2 {
				t.Errorf("%s[DATA] = %d, want 2", name, n)
			}
		}
	}
	if first.Sent["DATA"] != 1 {
		t.Errorf("the first run's map was added to: %v", first.Sent)
	}
}
