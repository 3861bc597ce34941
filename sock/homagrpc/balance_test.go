package homagrpc

import (
	"net/netip"
	"testing"
)

// Replacing a picker's servers keeps the ready flags of those that stay,
// PickFirst's current server when it stays (else the new first), and
// RoundRobin's count; the same list again changes nothing.
func TestPickerReplace(t *testing.T) {
	a, b, c, d := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:1"),
		netip.MustParseAddrPort("10.0.0.3:1"), netip.MustParseAddrPort("10.0.0.4:1")
	p := newPicker(PickFirst, []netip.AddrPort{a, b, c})
	p.setReady(b)
	p.setReady(c)
	p.unavailable(a)
	p.replace([]netip.AddrPort{d, c, b})
	if got := p.pick(); got != b {
		t.Errorf("pick first after a replacement keeping its server: %v, want %v", got, b)
	}
	for _, tc := range []struct {
		addr  netip.AddrPort
		ready bool
	}{{a, false}, {b, true}, {c, true}, {d, false}} {
		if got := p.isReady(tc.addr); got != tc.ready {
			t.Errorf("%v ready %v, want %v", tc.addr, got, tc.ready)
		}
	}
	set := p.set.Load()
	p.replace([]netip.AddrPort{d, c, b})
	if p.set.Load() != set {
		t.Error("the same list again replaced the set")
	}
	p.replace([]netip.AddrPort{c, d})
	if got := p.pick(); got != c {
		t.Errorf("pick first after its server went: %v, want the first, %v", got, c)
	}

	rr := newPicker(RoundRobin, []netip.AddrPort{a, b})
	rr.pick()
	rr.replace([]netip.AddrPort{a, b, c})
	for _, want := range []netip.AddrPort{b, c, a} {
		if got := rr.pick(); got != want {
			t.Errorf("round robin after a replacement: %v, want %v", got, want)
		}
	}
}
