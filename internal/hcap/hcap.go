// Package hcap finds Homa packets in captured link-layer frames and
// formats them one per line, for "homa capture": Homa straight on IPv4 or
// IPv6 (IP protocol 146), or Homa carried in UDP datagrams on chosen
// ports. It reads frames from pcap files (internal/pcapfile) or live from
// a Linux AF_PACKET socket (Live).
package hcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/internal/pcapfile"
)

// Protocol numbers and header sizes.
const (
	// ProtoHoma is the IANA-assigned IP protocol number of Homa.
	ProtoHoma = 146
	protoUDP  = 17

	udpHeaderLen = 8
	udpOffSrc    = 0
	udpOffDst    = 2
	udpOffLen    = 4

	// portsLen is how many bytes a Homa packet needs for its two ports.
	portsLen = 4
)

// Errors of this package. They are wrapped with details; test for them
// with errors.Is.
var (
	// ErrUDPPorts means a Filter selects UDP encapsulation without naming
	// the UDP ports that carry Homa.
	ErrUDPPorts = errors.New("hcap: UDP encapsulation needs the ports that carry Homa")
	// ErrPermission means the process may not open a packet socket.
	ErrPermission = errors.New("hcap: live capture needs CAP_NET_RAW (run as root or grant the capability)")
	// ErrUnsupported means live capture is not available: another
	// operating system than Linux, or an interface whose link-layer
	// header this package does not know.
	ErrUnsupported = errors.New("hcap: live capture not supported")
)

// Filter says which packets of a capture are Homa packets to show.
type Filter struct {
	// UDP selects Homa carried in UDP datagrams instead of IP protocol
	// 146.
	UDP bool
	// Ports, with UDP, are the UDP ports that carry Homa (a datagram from
	// or to one of them is taken as a Homa packet); they are required.
	// Without UDP they are the Homa ports to show (a packet from or to
	// one of them); empty shows every Homa packet.
	Ports []uint16
}

// Check reports whether f is usable.
func (f *Filter) Check() error {
	if f.UDP && len(f.Ports) == 0 {
		return ErrUDPPorts
	}
	return nil
}

// Packet is a Homa packet found in a frame.
type Packet struct {
	// Time is when the frame was captured.
	Time time.Time
	// Src and Dst are the IP addresses of the packet.
	Src, Dst netip.Addr
	// TOS is the IPv4 TOS byte or IPv6 traffic class.
	TOS uint8
	// Homa is the Homa packet, from the common header on. It aliases the
	// frame.
	Homa []byte
	// Decoded is the packet decoded, when Err is nil. A DATA payload
	// aliases the frame.
	Decoded wire.Packet
	// Err is why Homa does not decode (a wire.Error), or nil.
	Err error
}

// Find returns the Homa packet that the frame, of link type lt and
// captured at t, carries under f, and whether it carries one. Frames that
// are not IP, IP packets of other protocols, fragments and truncated
// frames carry none. A packet of protocol 146 (or a datagram on a Homa UDP
// port) that does not decode is returned with Err set.
func (f *Filter) Find(frame []byte, lt pcapfile.LinkType, t time.Time) (Packet, bool) {
	src, dst, proto, tos, payload, err := pcapfile.IPPayload(frame, lt)
	if err != nil {
		return Packet{}, false
	}
	var homa []byte
	switch {
	case f.UDP && proto == protoUDP:
		var ok bool
		if homa, ok = f.udpPayload(payload); !ok {
			return Packet{}, false
		}
	case !f.UDP && proto == ProtoHoma:
		homa = payload
		if len(f.Ports) > 0 && !f.portsMatch(homa) {
			return Packet{}, false
		}
	default:
		return Packet{}, false
	}
	p := Packet{Time: t, Src: src, Dst: dst, TOS: tos, Homa: homa}
	p.Err = p.Decoded.Parse(homa)
	return p, true
}

// udpPayload returns the payload of a UDP datagram from or to one of the
// filter's ports.
func (f *Filter) udpPayload(b []byte) ([]byte, bool) {
	if len(b) < udpHeaderLen {
		return nil, false
	}
	sport := binary.BigEndian.Uint16(b[udpOffSrc:])
	dport := binary.BigEndian.Uint16(b[udpOffDst:])
	if !slices.Contains(f.Ports, sport) && !slices.Contains(f.Ports, dport) {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(b[udpOffLen:]))
	if n < udpHeaderLen || n > len(b) {
		return nil, false
	}
	return b[udpHeaderLen:n], true
}

// portsMatch reports whether the Homa packet b is from or to one of the
// filter's ports. A packet too short to hold its ports matches none.
func (f *Filter) portsMatch(b []byte) bool {
	if len(b) < portsLen {
		return false
	}
	return slices.Contains(f.Ports, binary.BigEndian.Uint16(b[0:])) ||
		slices.Contains(f.Ports, binary.BigEndian.Uint16(b[2:]))
}

// TimeFormat is the layout of the time stamp at the start of a line: the
// time of day in microseconds, as tcpdump prints it.
const TimeFormat = "15:04:05.000000"

// String formats p on one line: the time stamp, "src -> dst", and the
// packet as wire.Packet.String prints it, or, for a packet that does not
// decode, its length and the error:
//
//	06:43:10.006603 10.146.12.1 -> 10.146.12.2 DATA 40000->500 id=1000 off=0 ...
//	06:43:10.010001 10.146.12.1 -> 10.146.12.2 undecodable Homa packet (12 bytes): wire: packet shorter than its header
func (p *Packet) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s %v -> %v ", p.Time.Format(TimeFormat), p.Src, p.Dst)
	if p.Err != nil {
		fmt.Fprintf(&s, "undecodable Homa packet (%d bytes): %v", len(p.Homa), p.Err)
	} else {
		s.WriteString(p.Decoded.String())
	}
	return s.String()
}

// ParsePorts parses a comma-separated list of ports (1..65535), as given
// on a command line.
func ParsePorts(list string) ([]uint16, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var ports []uint16
	for f := range strings.SplitSeq(list, ",") {
		p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("bad port %q (want 1..65535)", f)
		}
		ports = append(ports, uint16(p))
	}
	return ports, nil
}
