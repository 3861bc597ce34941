// Package hcap finds Homa packets in captured link-layer frames and
// formats them one per line, for "homa capture": Homa straight on IPv4 or
// IPv6 (IP protocol 146), or Homa carried in UDP datagrams on chosen
// ports. It reads frames from pcap files (internal/capture/pcapfile) or live from
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
	"github.com/homa-go/homa/internal/capture/pcapfile"
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
	// Homa is the Homa packet, from the common header on, as far as the
	// frame holds it. It aliases the frame.
	Homa []byte
	// Len is the Homa packet's length as the IP (or UDP) header gives
	// it: more than len(Homa) when the capture's snapshot length cut the
	// frame (see Truncated).
	Len int
	// Decoded is the packet decoded, when Err is nil. A DATA payload
	// aliases the frame; in a truncated packet it holds only the bytes
	// captured.
	Decoded wire.Packet
	// Err is why Homa does not decode (a wire.Error), or nil.
	Err error
}

// Truncated reports whether the capture cut the packet: the frame holds
// less of it than the IP (or UDP) header says it has. A truncated packet
// whose header was captured whole still decodes (a DATA packet whose
// payload was cut is a DATA packet); one whose header was cut has Err
// wire.ErrShort.
func (p *Packet) Truncated() bool { return len(p.Homa) < p.Len }

// Malformed reports whether the packet does not decode for a reason
// other than the capture's cut: Err is set, and it is not the short
// header of a truncated packet.
func (p *Packet) Malformed() bool {
	return p.Err != nil && !(p.Truncated() && errors.Is(p.Err, wire.ErrShort))
}

// Verdict is what Find makes of a frame.
type Verdict uint8

const (
	// NotFound: the frame carries no Homa packet that the filter selects.
	NotFound Verdict = iota
	// Found: the frame carries one (which may be truncated or not decode).
	Found
	// Cut: the frame ends before it shows whether it carries one: within
	// its link-layer, IP or UDP header, or, when the filter selects Homa
	// ports, before the ports. The capture's snapshot length cuts frames
	// so (or a frame's headers claim more than it holds).
	Cut
)

// Find returns the Homa packet that the frame, of link type lt and
// captured at t, carries under f, with Found. Frames that are not IP, IP
// packets of other protocols, fragments and packets the filter leaves out
// are NotFound; a frame that ends too soon to tell is Cut. A packet of
// protocol 146 (or a datagram on a Homa UDP port) is found even when it
// does not decode, with Err set, and when the frame holds only part of
// it, with Truncated true.
func (f *Filter) Find(frame []byte, lt pcapfile.LinkType, t time.Time) (Packet, Verdict) {
	ip, err := pcapfile.ParseIP(frame, lt)
	if errors.Is(err, pcapfile.ErrTruncated) {
		return Packet{}, Cut
	}
	if err != nil {
		return Packet{}, NotFound
	}
	p := Packet{Time: t, Src: ip.Src, Dst: ip.Dst, TOS: ip.TOS}
	switch {
	case f.UDP && ip.Proto == protoUDP:
		if v := f.udpPayload(&p, &ip); v != Found {
			return Packet{}, v
		}
	case !f.UDP && ip.Proto == ProtoHoma:
		p.Homa, p.Len = ip.Payload, ip.PayloadLen
		if len(f.Ports) > 0 && !f.portsMatch(p.Homa) {
			if len(p.Homa) < portsLen && p.Truncated() {
				return Packet{}, Cut
			}
			return Packet{}, NotFound
		}
	default:
		return Packet{}, NotFound
	}
	p.Err = p.Decoded.Parse(p.Homa)
	return p, Found
}

// udpPayload sets p.Homa and p.Len to the payload of the UDP datagram ip
// carries, if it is from or to one of the filter's ports.
func (f *Filter) udpPayload(p *Packet, ip *pcapfile.IPPacket) Verdict {
	b := ip.Payload
	if len(b) < udpHeaderLen {
		if ip.Truncated() {
			return Cut
		}
		return NotFound
	}
	sport := binary.BigEndian.Uint16(b[udpOffSrc:])
	dport := binary.BigEndian.Uint16(b[udpOffDst:])
	if !slices.Contains(f.Ports, sport) && !slices.Contains(f.Ports, dport) {
		return NotFound
	}
	n := int(binary.BigEndian.Uint16(b[udpOffLen:]))
	if n < udpHeaderLen || n > ip.PayloadLen {
		return NotFound
	}
	p.Homa, p.Len = b[udpHeaderLen:min(n, len(b))], n-udpHeaderLen
	return Found
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
// decode, its length and the error. A truncated packet says how much of
// it the capture holds (a DATA packet's paylen and homa_len then count
// the captured bytes):
//
//	06:43:10.006603 10.146.12.1 -> 10.146.12.2 DATA 40000->500 id=1000 off=0 ...
//	06:43:10.010001 10.146.12.1 -> 10.146.12.2 undecodable Homa packet (12 bytes): wire: packet shorter than its header
//	06:43:10.010002 10.146.12.1 -> 10.146.12.2 DATA 40000->500 id=1002 off=0 ... [truncated: 96 of 1456 bytes captured]
//	06:43:10.010003 10.146.12.1 -> 10.146.12.2 truncated Homa packet (20 of 1456 bytes captured): wire: packet shorter than its header
func (p *Packet) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s %v -> %v ", p.Time.Format(TimeFormat), p.Src, p.Dst)
	size := fmt.Sprintf("%d bytes", len(p.Homa))
	if p.Truncated() {
		size = fmt.Sprintf("%d of %d bytes captured", len(p.Homa), p.Len)
	}
	switch {
	case p.Malformed():
		fmt.Fprintf(&s, "undecodable Homa packet (%s): %v", size, p.Err)
	case p.Err != nil:
		fmt.Fprintf(&s, "truncated Homa packet (%s): %v", size, p.Err)
	default:
		s.WriteString(p.Decoded.String())
		if p.Truncated() {
			fmt.Fprintf(&s, " [truncated: %s]", size)
		}
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
