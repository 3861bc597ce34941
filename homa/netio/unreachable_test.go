package netio

import "testing"

func TestUnreachableString(t *testing.T) {
	for u, want := range map[Unreachable]string{
		NotUnreachable:      "packet",
		UnreachablePort:     "port unreachable",
		UnreachableProtocol: "protocol unreachable",
		UnreachableHost:     "host unreachable",
		9:                   "Unreachable(9)",
	} {
		if got := u.String(); got != want {
			t.Errorf("Unreachable(%d).String() = %q, want %q", uint8(u), got, want)
		}
	}
}

// TestClassifyICMP maps every ICMP and ICMPv6 type and code: only
// destination unreachable (and IPv6's unrecognized next header) are
// reports, fragmentation needed is not.
func TestClassifyICMP(t *testing.T) {
	for typ := range 256 {
		for code := range 256 {
			want4 := NotUnreachable
			if typ == 3 {
				switch code {
				case 2:
					want4 = UnreachableProtocol
				case 3:
					want4 = UnreachablePort
				case 4:
				default:
					want4 = UnreachableHost
				}
			}
			if got := classifyICMPv4(uint8(typ), uint8(code)); got != want4 {
				t.Errorf("ICMP type %d code %d: %v, want %v", typ, code, got, want4)
			}
			want6 := NotUnreachable
			switch {
			case typ == 1 && code == 4:
				want6 = UnreachablePort
			case typ == 1:
				want6 = UnreachableHost
			case typ == 4 && code == 1:
				want6 = UnreachableProtocol
			}
			if got := classifyICMPv6(uint8(typ), uint8(code)); got != want6 {
				t.Errorf("ICMPv6 type %d code %d: %v, want %v", typ, code, got, want6)
			}
		}
	}
}
