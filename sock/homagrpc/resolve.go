package homagrpc

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/homa-go/homa/sock"
)

// Resolver looks up the addresses of a host name, as *net.Resolver does
// (network "ip").
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// WithResolver sets how DialTarget looks up the host names of its
// target, at the dial and after (default net.DefaultResolver). A lookup
// must end when its context does: Close cancels one in progress and
// waits for it.
func WithResolver(r Resolver) DialOption {
	return func(o *dialOptions) { o.resolver = r }
}

// resolveTimeout bounds each lookup of a target's names.
const resolveTimeout = 10 * time.Second

// maxTargets bounds the servers of one target, names' addresses
// included.
const maxTargets = 256

// ResolveTarget is ParseTarget for targets that may name hosts:
// "homa:///db1.internal:5000,db2.internal:5000,10.0.0.7:5000". Each name
// is looked up with r (nil: net.DefaultResolver) and stands for all of
// its addresses of the target's family, in the order r gives them. The
// family is that of the first IP address written in the target, or, when
// none is, IPv4 if any name has an IPv4 address and IPv6 otherwise: a
// ClientConn's socket speaks one family. An address written in the
// other family is an error, as is a name with no address of the family.
// Repeated addresses count once; at most 256 servers in all. A
// ClientConn that DialTarget made looks the names up again when calls
// find its servers unavailable (see WithResolveInterval).
func ResolveTarget(ctx context.Context, target string, r Resolver) ([]netip.AddrPort, error) {
	return resolveTarget(ctx, target, r, false, false)
}

// resolveTarget is ResolveTarget; with fixed, the family is not chosen
// but IPv4 when want4 and IPv6 otherwise.
func resolveTarget(ctx context.Context, target string, r Resolver, fixed, want4 bool) ([]netip.AddrPort, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	rest, err := targetList(target)
	if err != nil {
		return nil, err
	}
	type entry struct {
		addrs []netip.Addr // a literal's one address, or a name's
		port  uint16
		name  string // "" for a literal
	}
	var entries []entry
	v4, v6 := false, false
	for _, s := range strings.Split(rest, ",") {
		s = strings.TrimSpace(s)
		if ap, err := netip.ParseAddrPort(s); err == nil {
			if ap.Port() == 0 {
				return nil, fmt.Errorf("homagrpc: target %q: %q has no port: %w", target, s, sock.ErrBadAddress)
			}
			a := ap.Addr().Unmap()
			if !fixed {
				fixed, want4 = true, a.Is4()
			}
			entries = append(entries, entry{addrs: []netip.Addr{a}, port: ap.Port()})
			continue
		}
		host, portStr, err := net.SplitHostPort(s)
		port, perr := strconv.ParseUint(portStr, 10, 16)
		if err != nil || perr != nil || port == 0 || host == "" {
			return nil, fmt.Errorf("homagrpc: target %q: %q is not HOST:PORT: %w", target, s, sock.ErrBadAddress)
		}
		addrs, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("homagrpc: target %q: looking up %q: %w", target, host, err)
		}
		for i, a := range addrs {
			addrs[i] = a.Unmap()
			v4 = v4 || addrs[i].Is4()
			v6 = v6 || addrs[i].Is6()
		}
		entries = append(entries, entry{addrs: addrs, port: uint16(port), name: host})
	}
	if !fixed {
		want4 = v4 || !v6
	}
	var out []netip.AddrPort
	for _, e := range entries {
		n := 0
		for _, a := range e.addrs {
			if a.Is4() != want4 {
				if e.name == "" {
					return nil, fmt.Errorf("homagrpc: target %q mixes address families: %w", target, sock.ErrBadAddress)
				}
				continue
			}
			n++
			if ap := netip.AddrPortFrom(a, e.port); !slices.Contains(out, ap) {
				if len(out) == maxTargets {
					return nil, fmt.Errorf("homagrpc: target %q: more than %d servers: %w", target, maxTargets, sock.ErrBadAddress)
				}
				out = append(out, ap)
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("homagrpc: target %q: %q has no %s address: %w", target, e.name, family(want4), sock.ErrBadAddress)
		}
	}
	return out, nil
}

func family(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

// targetList strips a target of its "homa:///" prefix.
func targetList(target string) (string, error) {
	rest := target
	if scheme, after, ok := strings.Cut(target, "://"); ok {
		if scheme != "homa" {
			return "", fmt.Errorf("homagrpc: target %q: scheme %q, want homa", target, scheme)
		}
		if !strings.HasPrefix(after, "/") {
			return "", fmt.Errorf("homagrpc: target %q: an authority is not supported (write homa:///HOST:PORT,HOST:PORT)", target)
		}
		rest = after[1:]
	}
	if rest == "" {
		return "", fmt.Errorf("homagrpc: target %q names no server: %w", target, sock.ErrBadAddress)
	}
	return rest, nil
}
