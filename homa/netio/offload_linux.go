//go:build linux

package netio

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UDP segmentation and receive offloads (Linux 4.18 and 5.0 on).
//
// GSO: a sendmsg with a UDP_SEGMENT control message (gso_size, 16 bits)
// hands the kernel one large UDP payload, which it (or the NIC) cuts
// into datagrams of gso_size bytes, the last one possibly shorter, each
// with its own IP and UDP headers. The kernel refuses (EINVAL) more than
// UDP_MAX_SEGMENTS segments (64; 128 on recent kernels), a gso_size
// above the path MTU less the headers, and sockets with SO_NO_CHECK, and
// (EIO) routes through IPsec or, on older kernels, devices without
// checksum offload. The payload must fit one IP datagram.
//
// GRO: with the UDP_GRO socket option set, the kernel may deliver
// consecutive datagrams of one flow, all of one size but the last, as
// one, with a UDP_GRO control message (an int: the segment size). Over
// loopback a GSO send reaches such a socket whole.

// Offload limits and sizes.
const (
	// maxGSOSegments is the most packets one GSO datagram carries: the
	// kernel's UDP_MAX_SEGMENTS on every kernel with UDP_SEGMENT.
	maxGSOSegments = 64
	// groCtlLen is the control buffer of one received datagram: a
	// UDP_GRO message needs unix.CmsgSpace(4), 16 bytes.
	groCtlLen = 32
	// sendCtlWords is the control buffer of one sent message, in 8-byte
	// words: an IP_TOS / IPV6_TCLASS message, unix.CmsgSpace(4), and a
	// UDP_SEGMENT one, unix.CmsgSpace(2), 32 bytes in all.
	sendCtlWords = 6
)

// probeGSO reports whether the kernel knows UDP_SEGMENT, asking without
// changing the socket: kernels without it refuse the option
// (ENOPROTOOPT).
func probeGSO(fd int) bool {
	_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	return err == nil
}

// enableGRO turns UDP_GRO on and reports whether the kernel took it.
func enableGRO(fd int) bool {
	return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
}

// putCmsg writes the header of a control message carrying dataLen bytes
// at the start of b, byte by byte (b need not be aligned).
func putCmsg(b []byte, level, typ int32, dataLen int) {
	var h unix.Cmsghdr
	n := unix.CmsgLen(dataLen)
	if unsafe.Sizeof(h.Len) == 8 {
		binary.NativeEndian.PutUint64(b, uint64(n))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(n))
	}
	off := unsafe.Sizeof(h.Len)
	binary.NativeEndian.PutUint32(b[off:], uint32(level))
	binary.NativeEndian.PutUint32(b[off+4:], uint32(typ))
}

// appendGSO appends a UDP_SEGMENT control message for segments of size
// bytes to b, within b's capacity (the caller makes room).
func appendGSO(b []byte, size int) []byte {
	n := len(b)
	b = b[:n+unix.CmsgSpace(2)]
	clear(b[n:])
	putCmsg(b[n:], unix.IPPROTO_UDP, unix.UDP_SEGMENT, 2)
	binary.NativeEndian.PutUint16(b[n+unix.CmsgLen(0):], uint16(size))
	return b
}

// parseGRO returns the segment size of a UDP_GRO control message in ctl
// (as recvmsg filled it), or 0 when there is none (a plain datagram).
func parseGRO(ctl []byte) int {
	for len(ctl) >= unix.SizeofCmsghdr {
		n, level, typ := cmsgHeader(ctl)
		if n < unix.SizeofCmsghdr || n > uint64(len(ctl)) {
			return 0
		}
		data := ctl[unix.SizeofCmsghdr:n]
		if level == unix.IPPROTO_UDP && typ == unix.UDP_GRO {
			switch {
			case len(data) >= 4:
				return int(binary.NativeEndian.Uint32(data))
			case len(data) >= 2:
				return int(binary.NativeEndian.Uint16(data))
			}
			return 0
		}
		next := cmsgAlign(n)
		if next >= uint64(len(ctl)) {
			break
		}
		ctl = ctl[next:]
	}
	return 0
}
