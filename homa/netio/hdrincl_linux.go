//go:build linux

package netio

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// Raw IPv4 Conns write their own IP headers (IP_HDRINCL). Without it
// the kernel builds the header, and, as it does for every raw socket
// without a transport header it knows, copies the packet from user
// memory while it sums it for a checksum that nothing reads
// (csum_partial_copy_generic): on loopback that copy took 40% longer
// than the plain copy of the receiving side. With IP_HDRINCL it copies
// the datagram plainly, fills in the total length, the header checksum
// and an IP id, and sends it as it is, never fragmented: the engine
// sizes packets for the path MTU anyway.
//
// The header is the one the kernel would build: version 4, no options,
// the priority's TOS, Don't Fragment (path MTU discovery, the kernel's
// default), the socket's TTL, protocol 146, and the source address left
// to the kernel's route (0), or the bound address.

// setHdrincl turns IP_HDRINCL on for a raw IPv4 socket and returns the
// TTL its headers carry (the socket's default, from the
// net.ipv4.ip_default_ttl sysctl). ok is false if the kernel refused.
func setHdrincl(fd int) (ttl uint8, ok bool) {
	t, err := unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL)
	if err != nil || t <= 0 || t > 255 {
		return 0, false
	}
	if unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_HDRINCL, 1) != nil {
		return 0, false
	}
	return uint8(t), true
}

// ipv4Header fills h with the IPv4 header of a packet of size bytes
// (the Homa packet, without the IP header) to dst with the given TOS.
// The kernel fills in the checksum, and the id if it wants one (it
// leaves 0 in a Don't Fragment datagram, as RFC 6864 allows).
func (c *sockConn) ipv4Header(h *[ipv4HeaderLen]byte, size int, dst [4]byte, tos uint8) {
	const dontFragment = 0x4000
	h[0] = 0x45 // version 4, 5 words
	h[1] = tos
	binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderLen+size))
	binary.BigEndian.PutUint32(h[4:], dontFragment) // id 0, flags, fragment offset 0
	h[8] = c.ttl
	h[9] = ipProtoHoma
	h[10], h[11] = 0, 0 // checksum: the kernel's
	var src [4]byte
	if !c.laddr.IsUnspecified() {
		src = c.laddr.As4()
	}
	copy(h[12:16], src[:])
	copy(h[16:20], dst[:])
}
