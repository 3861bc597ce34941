package netio

import (
	"encoding/binary"
	"strconv"
)

// Unreachable says why a packet a Conn sent was not delivered, as an
// ICMP destination-unreachable message reported it.
type Unreachable uint8

const (
	// NotUnreachable is the zero value: an ordinary packet.
	NotUnreachable Unreachable = iota
	// UnreachablePort means nothing listens on the Homa port (ICMP or
	// ICMPv6 port unreachable).
	UnreachablePort
	// UnreachableProtocol means the host does not speak Homa (ICMP
	// protocol unreachable; for IPv6, ICMPv6 parameter problem
	// "unrecognized next header").
	UnreachableProtocol
	// UnreachableHost is any other destination-unreachable code: network,
	// host or address unreachable, administratively prohibited, and so on.
	UnreachableHost
)

// String returns a short name of u.
func (u Unreachable) String() string {
	switch u {
	case NotUnreachable:
		return "packet"
	case UnreachablePort:
		return "port unreachable"
	case UnreachableProtocol:
		return "protocol unreachable"
	case UnreachableHost:
		return "host unreachable"
	}
	return "Unreachable(" + strconv.Itoa(int(u)) + ")"
}

// ICMP facts (RFC 792, RFC 4443).
const (
	icmpv4DestUnreach   = 3 // type: destination unreachable
	icmpv4ProtoUnreach  = 2 // code: protocol unreachable
	icmpv4PortUnreach   = 3 // code: port unreachable
	icmpv4FragNeeded    = 4 // code: fragmentation needed (a path MTU signal)
	icmpv6DestUnreach   = 1 // type: destination unreachable
	icmpv6PortUnreach   = 4 // code: port unreachable
	icmpv6ParamProblem  = 4 // type: parameter problem
	icmpv6UnknownNextHd = 1 // code: unrecognized next header

	// An ICMP error quotes as much of the offending datagram as fits in
	// 576 bytes (IPv4, RFC 1812) or 1280 bytes (IPv6, RFC 4443) with
	// its own IP and ICMP headers. Less the quoted IP header, that leaves
	// this much of a Homa packet sent over raw IP.
	ICMPv4Quote = 576 - ipv4HeaderLen - 8 - ipv4HeaderLen
	ICMPv6Quote = 1280 - ipv6HeaderLen - 8 - ipv6HeaderLen

	// ReportMinLen is the shortest report returned: the two Homa ports.
	ReportMinLen = 4
)

// classifyICMPv4 maps an ICMP error to the Unreachable it reports, or
// NotUnreachable when it reports something else (time exceeded, a path
// MTU change, ...): such messages are no reason to give up on a peer.
func classifyICMPv4(typ, code uint8) Unreachable {
	if typ != icmpv4DestUnreach {
		return NotUnreachable
	}
	switch code {
	case icmpv4PortUnreach:
		return UnreachablePort
	case icmpv4ProtoUnreach:
		return UnreachableProtocol
	case icmpv4FragNeeded:
		return NotUnreachable // the kernel has lowered the path MTU
	}
	return UnreachableHost
}

// classifyICMPv6 is classifyICMPv4 for ICMPv6. IPv6 has no protocol
// unreachable code: a host that does not know the next header answers
// parameter problem, code "unrecognized next header".
func classifyICMPv6(typ, code uint8) Unreachable {
	switch {
	case typ == icmpv6DestUnreach && code == icmpv6PortUnreach:
		return UnreachablePort
	case typ == icmpv6DestUnreach:
		return UnreachableHost
	case typ == icmpv6ParamProblem && code == icmpv6UnknownNextHd:
		return UnreachableProtocol
	}
	return NotUnreachable
}

// srcPort returns the Homa source port of b, which holds at least 2 bytes.
func srcPort(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
