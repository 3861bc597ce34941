package lab

import (
	"errors"
	"strings"
	"testing"

	"github.com/homa-go/homa/homa/netio"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
	}{
		{"1gbit", 1e9},
		{"1Gbit", 1e9},
		{"2.5mbit", 2.5e6},
		{"100kbit", 100e3},
		{"250000bit", 250e3},
		{" 10gbit ", 10e9},
		{"0.1tbit", 100e9},
	} {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "1000", "gbit", "1gbps", "-1gbit", "1kbit", "1tbit", "NaNgbit", "1 g bit"} {
		_, err := ParseRate(in)
		var re *RateError
		if !errors.As(err, &re) {
			t.Errorf("ParseRate(%q) error = %v, want a *RateError", in, err)
		}
	}
}

func TestRateString(t *testing.T) {
	for _, tc := range []struct {
		r    Rate
		want string
	}{
		{1e9, "1gbit"}, {250e6, "250mbit"}, {1500e3, "1500kbit"}, {1234567, "1234567bit"}, {0, "0bit"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("Rate(%d).String() = %q, want %q", uint64(tc.r), got, tc.want)
		}
		if tc.r == 0 {
			continue
		}
		if back, err := ParseRate(tc.want); tc.r >= minRate && (err != nil || back != tc.r) {
			t.Errorf("ParseRate(%q) = %v, %v; want %d", tc.want, back, err, uint64(tc.r))
		}
	}
}

// TestTCScript checks the queueing commands: the rate limiter at the root,
// one class per priority with htb priority 7-p, and a filter sending each
// priority's TOS to its class.
func TestTCScript(t *testing.T) {
	l := Link{Rate: 1e9, Buffer: 300000}
	s := tcScript("p1", l, &netio.DefaultDSCP)
	text := strings.Join(s, "\n")
	want := []string{
		"qdisc replace dev p1 root handle 1: tbf rate 1000000000bit burst 3028 limit 300000",
		"qdisc add dev p1 parent 1:1 handle 10: htb default 8",
		"class add dev p1 parent 10: classid 10:8 htb rate 10000000000bit ceil 10000000000bit burst 64k cburst 64k prio 0 quantum 1514",
		"class add dev p1 parent 10: classid 10:1 htb rate 10000000000bit ceil 10000000000bit burst 64k cburst 64k prio 7 quantum 1514",
		"qdisc add dev p1 parent 10:1 handle 20: bfifo limit 300000",
		"qdisc add dev p1 parent 10:8 handle 27: bfifo limit 300000",
		"filter add dev p1 parent 10: protocol ip prio 1 u32 match ip tos 0x00 0xfc flowid 10:1",
		"filter add dev p1 parent 10: protocol ip prio 1 u32 match ip tos 0xe0 0xfc flowid 10:8",
		"filter add dev p1 parent 10: protocol ip prio 1 u32 match ip tos 0x60 0xfc flowid 10:4",
		"filter add dev p1 parent 10: protocol ipv6 prio 2 u32 match ip6 priority 0xa0 0xfc flowid 10:6",
	}
	for _, w := range want {
		if !strings.Contains(text, w+"\n") && !strings.HasSuffix(text, w) {
			t.Errorf("script lacks %q; it is:\n%s", w, text)
		}
	}
	if n := len(s); n != 2+2*Priorities+2*Priorities {
		t.Errorf("script has %d commands, want %d", n, 2+4*Priorities)
	}
	// Jumbo frames: the burst is two of them, the quantum one.
	text = strings.Join(tcScript("p1", Link{Rate: 1e9, Buffer: 300000, MTU: 9000}, &netio.DefaultDSCP), "\n")
	for _, w := range []string{"burst 18028 limit 300000", "prio 0 quantum 9014"} {
		if !strings.Contains(text, w) {
			t.Errorf("with MTU 9000, script lacks %q", w)
		}
	}
	// A remapped DSCP table moves the filters with it.
	m := netio.DSCP{46, 1, 2, 3, 4, 5, 6, 7}
	text = strings.Join(tcScript("p2", l, &m), "\n")
	if w := "match ip tos 0xb8 0xfc flowid 10:1"; !strings.Contains(text, w) {
		t.Errorf("with DSCP 46 for priority 0, script lacks %q", w)
	}
}

func TestLinkCheck(t *testing.T) {
	good := Link{Rate: 1e9, Buffer: DefaultBuffer}
	if err := good.check(); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
	for _, l := range []Link{
		{Rate: 0, Buffer: DefaultBuffer},
		{Rate: 1e9, Buffer: 100},
		{Rate: 1e9, Buffer: DefaultBuffer, Burst: 1000},
		{Rate: 1e12, Buffer: DefaultBuffer},
		{Rate: 1e9, Buffer: DefaultBuffer, MTU: 500},
		{Rate: 1e9, Buffer: DefaultBuffer, MTU: 70000},
		{Rate: 1e9, Buffer: 8000, MTU: 9000},
	} {
		if l.check() == nil {
			t.Errorf("%+v: accepted", l)
		}
	}
	for _, c := range []Config{
		{Hosts: 1, Link: good},
		{Hosts: MaxHosts + 1, Link: good},
		{Hosts: 3, Link: good, Rates: map[int]Rate{4: 1e9}},
		{Hosts: 3, Link: good, Rates: map[int]Rate{1: 10}},
	} {
		var ce *ConfigError
		if err := c.Check(); !errors.As(err, &ce) {
			t.Errorf("%+v: error %v, want a *ConfigError", c, err)
		}
	}
	c := Config{Hosts: 3, Link: good, Rates: map[int]Rate{1: 10e6}}
	if err := c.Check(); err != nil || c.link(1).Rate != 10e6 || c.link(2).Rate != 1e9 {
		t.Errorf("per-host rate: %v, links %v %v", err, c.link(1), c.link(2))
	}
}
