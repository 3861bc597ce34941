//go:build linux

package netio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// OpenUDP opens a Conn that carries each Homa packet as the payload of a
// UDP datagram, for hosts where raw sockets are not allowed. The UDP port
// is the Homa port at both ends: the socket binds UDP port port (port 0:
// a free client port, the bind itself being the reservation), and a
// packet goes to the UDP port named by its Homa destination port. laddr
// picks the family and, when specific, the address bound. A port already
// bound gives ErrPortInUse.
//
// Received datagrams shorter than the Homa common header or naming
// another destination port are discarded.
func OpenUDP(laddr netip.Addr, port uint16, opt *Options) (Conn, error) {
	laddr, err := checkLocal(laddr)
	if err != nil {
		return nil, err
	}
	network := udpNetwork(laddr)
	var pc *net.UDPConn
	if port != 0 {
		if pc, err = listenUDP(network, laddr, port); err != nil {
			return nil, err
		}
	} else {
		port, err = findClientPort(func(p uint16) (err error) {
			pc, err = listenUDP(network, laddr, p)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return newSockConn(pc, laddr, port, true, nil, opt)
}

func listenUDP(network string, laddr netip.Addr, port uint16) (*net.UDPConn, error) {
	pc, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(laddr, port)))
	if errors.Is(err, unix.EADDRINUSE) {
		return nil, fmt.Errorf("%w: %d: %w", ErrPortInUse, port, err)
	}
	return pc, err
}

// udpNetwork is the network name of UDP sockets on laddr.
func udpNetwork(laddr netip.Addr) string {
	if laddr.Is6() {
		return "udp6"
	}
	return "udp4"
}
