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
// as ErrUnsupported.
func IPPayload(frame []byte, linkType LinkType) (src, dst netip.Addr, proto, tos uint8, payload []byte, err error) {
	p, err := parseFrame(frame, linkType)
	return p.src, p.dst, p.proto, p.tos, p.payload, err
}

// ipPacket is what IPPayload reports.
type ipPacket struct {
	src, dst   netip.Addr
	proto, tos uint8
	payload    []byte
}

// parseFrame strips the link-layer header from frame and decodes the IP
// packet inside.
func parseFrame(frame []byte, linkType LinkType) (ipPacket, error) {
	var etherType uint16
	switch linkType {
	case LinkEthernet:
		if len(frame) < ethHeaderLen {
			return ipPacket{}, fmt.Errorf("%w: %d-byte Ethernet frame", ErrTruncated, len(frame))
		}
		etherType, frame = binary.BigEndian.Uint16(frame[ethOffType:]), frame[ethHeaderLen:]
		for etherType == etherTypeVLAN || etherType == etherTypeQinQ || etherType == etherTypeQinQv1 {
			if len(frame) < vlanTagLen {
				return ipPacket{}, fmt.Errorf("%w: VLAN tag", ErrTruncated)
			}
			etherType, frame = binary.BigEndian.Uint16(frame[vlanOffType:]), frame[vlanTagLen:]
		}
	case LinkLinuxSLL:
		if len(frame) < sllHeaderLen {
			return ipPacket{}, fmt.Errorf("%w: %d-byte SLL frame", ErrTruncated, len(frame))
		}
		etherType, frame = binary.BigEndian.Uint16(frame[sllOffProtocol:]), frame[sllHeaderLen:]
	case LinkRaw, LinkRawBSD:
		if len(frame) == 0 {
			return ipPacket{}, fmt.Errorf("%w: empty frame", ErrTruncated)
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
		return ipPacket{}, fmt.Errorf("%w: link type %d", ErrUnsupported, linkType)
	}
	switch etherType {
	case etherTypeIPv4:
		return ipv4Payload(frame)
	case etherTypeIPv6:
		return ipv6Payload(frame)
	}
	return ipPacket{}, fmt.Errorf("%w: ethertype 0x%04x", ErrUnsupported, etherType)
}

// ipv4Payload decodes the IPv4 packet at the start of b.
func ipv4Payload(b []byte) (ipPacket, error) {
	if len(b) < ipv4MinHeaderLen {
		return ipPacket{}, fmt.Errorf("%w: %d-byte IPv4 packet", ErrTruncated, len(b))
	}
	if v := b[0] >> 4; v != 4 {
		return ipPacket{}, fmt.Errorf("%w: IP version %d in an IPv4 frame", ErrUnsupported, v)
	}
	hdrLen := int(b[0]&0x0f) * 4
	totalLen := int(binary.BigEndian.Uint16(b[ipv4OffTotalLen:]))
	if hdrLen < ipv4MinHeaderLen || totalLen < hdrLen {
		return ipPacket{}, fmt.Errorf("%w: IPv4 header length %d, total length %d", ErrCorrupt, hdrLen, totalLen)
	}
	if totalLen > len(b) {
		return ipPacket{}, fmt.Errorf("%w: IPv4 total length %d, %d bytes captured", ErrTruncated, totalLen, len(b))
	}
	if frag := binary.BigEndian.Uint16(b[ipv4OffFragment:]); frag&(ipv4MoreFrags|ipv4FragOffset) != 0 {
		return ipPacket{}, fmt.Errorf("%w: IPv4 fragment", ErrUnsupported)
	}
	return ipPacket{
		src:     netip.AddrFrom4([4]byte(b[ipv4OffSrc:])),
		dst:     netip.AddrFrom4([4]byte(b[ipv4OffDst:])),
		proto:   b[ipv4OffProtocol],
		tos:     b[ipv4OffTOS],
		payload: b[hdrLen:totalLen],
	}, nil
}

// ipv6Payload decodes the IPv6 packet at the start of b, skipping
// hop-by-hop, routing and destination options headers.
func ipv6Payload(b []byte) (ipPacket, error) {
	if len(b) < ipv6HeaderLen {
		return ipPacket{}, fmt.Errorf("%w: %d-byte IPv6 packet", ErrTruncated, len(b))
	}
	if v := b[0] >> 4; v != 6 {
		return ipPacket{}, fmt.Errorf("%w: IP version %d in an IPv6 frame", ErrUnsupported, v)
	}
	end := ipv6HeaderLen + int(binary.BigEndian.Uint16(b[ipv6OffPayloadLen:]))
	if end > len(b) {
		return ipPacket{}, fmt.Errorf("%w: IPv6 payload ends at %d, %d bytes captured", ErrTruncated, end, len(b))
	}
	p := ipPacket{
		src:     netip.AddrFrom16([16]byte(b[ipv6OffSrc:])),
		dst:     netip.AddrFrom16([16]byte(b[ipv6OffDst:])),
		proto:   b[ipv6OffNextHeader],
		tos:     b[0]<<4 | b[1]>>4,
		payload: b[ipv6HeaderLen:end],
	}
	for p.proto == ipv6HopByHop || p.proto == ipv6Routing || p.proto == ipv6DestOptions {
		// Each of these starts with the next header and its length in
		// 8-byte units, not counting the first 8.
		if len(p.payload) < 8 || len(p.payload) < (int(p.payload[1])+1)*8 {
			return ipPacket{}, fmt.Errorf("%w: IPv6 extension header", ErrTruncated)
		}
		p.proto, p.payload = p.payload[0], p.payload[(int(p.payload[1])+1)*8:]
	}
	if p.proto == ipv6Fragment {
		return ipPacket{}, fmt.Errorf("%w: IPv6 fragment", ErrUnsupported)
	}
	return p, nil
}
