package pcapfile

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Link-layer headers.
const (
	ethHeaderLen   = 14
	ethOffType     = 12
	vlanTagLen     = 4
	vlanOffType    = 2 // after the tag control information
	sllHeaderLen   = 16
	sllOffProtocol = 14

	etherTypeIPv4   = 0x0800
	etherTypeIPv6   = 0x86dd
	etherTypeVLAN   = 0x8100
	etherTypeQinQ   = 0x88a8
	etherTypeQinQv1 = 0x9100
)

// IPv4 header (RFC 791).
const (
	ipv4MinHeaderLen = 20
	ipv4OffTOS       = 1
	ipv4OffTotalLen  = 2
	ipv4OffFragment  = 6 // flags and fragment offset
	ipv4OffProtocol  = 9
	ipv4OffSrc       = 12
	ipv4OffDst       = 16
	ipv4MoreFrags    = 0x2000
	ipv4FragOffset   = 0x1fff
)

// IPv6 header (RFC 8200).
const (
	ipv6HeaderLen     = 40
	ipv6OffPayloadLen = 4
	ipv6OffNextHeader = 6
	ipv6OffSrc        = 8
	ipv6OffDst        = 24

	ipv6HopByHop    = 0
	ipv6Routing     = 43
	ipv6Fragment    = 44
	ipv6DestOptions = 60
)

// IPPayload finds the IP packet in a frame of the given link type and
// returns its addresses, protocol (IPv6: the header after any hop-by-hop,
// routing and destination options headers), TOS / traffic class byte and
// payload. The payload is cut at the length the IP header gives, so
// Ethernet padding is excluded; it aliases frame. Fragments are reported
// as ErrUnsupported, and a frame that holds less than the whole IP packet
// (cut by the capture's snapshot length) as ErrTruncated; ParseIP takes
// what such a frame holds.
func IPPayload(frame []byte, linkType LinkType) (src, dst netip.Addr, proto, tos uint8, payload []byte, err error) {
	p, err := ParseIP(frame, linkType)
	if err == nil && p.Truncated() {
		err = fmt.Errorf("%w: IP payload of %d bytes, %d captured", ErrTruncated, p.PayloadLen, len(p.Payload))
	}
	if err != nil {
		return netip.Addr{}, netip.Addr{}, 0, 0, nil, err
	}
	return p.Src, p.Dst, p.Proto, p.TOS, p.Payload, nil
}

// IPPacket is the IP packet ParseIP finds in a frame.
type IPPacket struct {
	// Src and Dst are the packet's addresses.
	Src, Dst netip.Addr
	// Proto is the protocol of the payload (IPv6: the header after any
	// hop-by-hop, routing and destination options headers).
	Proto uint8
	// TOS is the IPv4 TOS byte or the IPv6 traffic class.
	TOS uint8
	// Payload is the captured part of the payload, up to the length the
	// IP header gives (so Ethernet padding is excluded). It aliases the
	// frame.
	Payload []byte
	// PayloadLen is the payload's length as the IP header gives it. It is
	// more than len(Payload) when the capture cut the packet.
	PayloadLen int
}

// Truncated reports whether the capture cut the packet: the frame holds
// less of the payload than the IP header says it has.
func (p *IPPacket) Truncated() bool { return len(p.Payload) < p.PayloadLen }

// ParseIP finds the IP packet in a frame of the given link type, as
// IPPayload does, but also in a frame that the capture's snapshot length
// cut inside the IP payload: the link-layer and IP headers (IPv6
// extension headers included) must be whole, and the packet's Payload is
// what the frame holds of it (Truncated reports the cut). A frame cut
// within those headers gives ErrTruncated.
func ParseIP(frame []byte, linkType LinkType) (IPPacket, error) {
	var etherType uint16
	switch linkType {
	case LinkEthernet:
		if len(frame) < ethHeaderLen {
			return IPPacket{}, fmt.Errorf("%w: %d-byte Ethernet frame", ErrTruncated, len(frame))
		}
		etherType, frame = binary.BigEndian.Uint16(frame[ethOffType:]), frame[ethHeaderLen:]
		for etherType == etherTypeVLAN || etherType == etherTypeQinQ || etherType == etherTypeQinQv1 {
			if len(frame) < vlanTagLen {
				return IPPacket{}, fmt.Errorf("%w: VLAN tag", ErrTruncated)
			}
			etherType, frame = binary.BigEndian.Uint16(frame[vlanOffType:]), frame[vlanTagLen:]
		}
	case LinkLinuxSLL:
		if len(frame) < sllHeaderLen {
			return IPPacket{}, fmt.Errorf("%w: %d-byte SLL frame", ErrTruncated, len(frame))
		}
		etherType, frame = binary.BigEndian.Uint16(frame[sllOffProtocol:]), frame[sllHeaderLen:]
	case LinkRaw, LinkRawBSD:
		if len(frame) == 0 {
			return IPPacket{}, fmt.Errorf("%w: empty frame", ErrTruncated)
		}
		etherType = etherTypeIPv4
		if frame[0]>>4 == 6 {
			etherType = etherTypeIPv6
		}
	case LinkIPv4:
		etherType = etherTypeIPv4
	case LinkIPv6:
		etherType = etherTypeIPv6
	default:
		return IPPacket{}, fmt.Errorf("%w: link type %d", ErrUnsupported, linkType)
	}
	switch etherType {
	case etherTypeIPv4:
		return ipv4Payload(frame)
	case etherTypeIPv6:
		return ipv6Payload(frame)
	}
	return IPPacket{}, fmt.Errorf("%w: ethertype 0x%04x", ErrUnsupported, etherType)
}

// ipv4Payload decodes the IPv4 packet at the start of b.
func ipv4Payload(b []byte) (IPPacket, error) {
	if len(b) < ipv4MinHeaderLen {
		return IPPacket{}, fmt.Errorf("%w: %d-byte IPv4 packet", ErrTruncated, len(b))
	}
	if v := b[0] >> 4; v != 4 {
		return IPPacket{}, fmt.Errorf("%w: IP version %d in an IPv4 frame", ErrUnsupported, v)
	}
	hdrLen := int(b[0]&0x0f) * 4
	totalLen := int(binary.BigEndian.Uint16(b[ipv4OffTotalLen:]))
	if hdrLen < ipv4MinHeaderLen || totalLen < hdrLen {
		return IPPacket{}, fmt.Errorf("%w: IPv4 header length %d, total length %d", ErrCorrupt, hdrLen, totalLen)
	}
	if hdrLen > len(b) {
		return IPPacket{}, fmt.Errorf("%w: IPv4 header of %d bytes, %d captured", ErrTruncated, hdrLen, len(b))
	}
	if frag := binary.BigEndian.Uint16(b[ipv4OffFragment:]); frag&(ipv4MoreFrags|ipv4FragOffset) != 0 {
		return IPPacket{}, fmt.Errorf("%w: IPv4 fragment", ErrUnsupported)
	}
	return IPPacket{
		Src:        netip.AddrFrom4([4]byte(b[ipv4OffSrc:])),
		Dst:        netip.AddrFrom4([4]byte(b[ipv4OffDst:])),
		Proto:      b[ipv4OffProtocol],
		TOS:        b[ipv4OffTOS],
		Payload:    b[hdrLen:min(totalLen, len(b))],
		PayloadLen: totalLen - hdrLen,
	}, nil
}

// ipv6Payload decodes the IPv6 packet at the start of b, skipping
// hop-by-hop, routing and destination options headers.
func ipv6Payload(b []byte) (IPPacket, error) {
	if len(b) < ipv6HeaderLen {
		return IPPacket{}, fmt.Errorf("%w: %d-byte IPv6 packet", ErrTruncated, len(b))
	}
	if v := b[0] >> 4; v != 6 {
		return IPPacket{}, fmt.Errorf("%w: IP version %d in an IPv6 frame", ErrUnsupported, v)
	}
	n := int(binary.BigEndian.Uint16(b[ipv6OffPayloadLen:]))
	p := IPPacket{
		Src:        netip.AddrFrom16([16]byte(b[ipv6OffSrc:])),
		Dst:        netip.AddrFrom16([16]byte(b[ipv6OffDst:])),
		Proto:      b[ipv6OffNextHeader],
		TOS:        b[0]<<4 | b[1]>>4,
		Payload:    b[ipv6HeaderLen:min(ipv6HeaderLen+n, len(b))],
		PayloadLen: n,
	}
	for p.Proto == ipv6HopByHop || p.Proto == ipv6Routing || p.Proto == ipv6DestOptions {
		// Each of these starts with the next header and its length in
		// 8-byte units, not counting the first 8; it must be whole in
		// the frame (and so within the payload).
		if len(p.Payload) < 8 || len(p.Payload) < (int(p.Payload[1])+1)*8 {
			return IPPacket{}, fmt.Errorf("%w: IPv6 extension header", ErrTruncated)
		}
		k := (int(p.Payload[1]) + 1) * 8
		p.Proto, p.Payload, p.PayloadLen = p.Payload[0], p.Payload[k:], p.PayloadLen-k
	}
	if p.Proto == ipv6Fragment {
		return IPPacket{}, fmt.Errorf("%w: IPv6 fragment", ErrUnsupported)
	}
	return p, nil
}
