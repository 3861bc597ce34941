package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/homa-go/homa/sock"
)

func transportFor(udp bool) sock.Transport {
	if udp {
		return sock.UDP
	}
	return sock.Raw
}

// resolve parses HOST:PORT, looking the host up if it is a name. An empty
// host means 0.0.0.0.
func resolve(ctx context.Context, hostport string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: bad port %q", hostport, port)
	}
	if host == "" {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(p)), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(p)), nil
}
