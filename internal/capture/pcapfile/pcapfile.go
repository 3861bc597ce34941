// Package pcapfile reads and writes classic pcap capture files and finds the
// IP packet inside a captured frame.
//
// The reader accepts both byte orders and both the microsecond and the
// nanosecond timestamp magics. IPPayload and ParseIP understand Ethernet
// (with 802.1Q and 802.1ad VLAN tags), raw IP and Linux cooked (SLL)
// frames carrying IPv4 or IPv6; ParseIP also takes a frame that the
// capture's snapshot length cut inside the IP payload. The writer
// produces little-endian microsecond files, the form tcpdump writes on
// x86, and keeps each record's original length.
package pcapfile

import "errors"

// LinkType is the link-layer header type of the frames in a file.
type LinkType uint32

// Link types understood by IPPayload.
const (
	LinkEthernet LinkType = 1
	LinkRawBSD   LinkType = 12 // raw IP, as some BSDs write it
	LinkRaw      LinkType = 101
	LinkLinuxSLL LinkType = 113
	LinkIPv4     LinkType = 228
	LinkIPv6     LinkType = 229
)

// Errors returned by the reader and by IPPayload. They are wrapped with
// details; test for them with errors.Is.
var (
	// ErrNotPcap means the file does not start with a classic pcap header.
	ErrNotPcap = errors.New("pcapfile: not a classic pcap file")
	// ErrCorrupt means a record header or an IP header makes no sense.
	ErrCorrupt = errors.New("pcapfile: corrupt record")
	// ErrUnsupported means a link type, network protocol or IP feature
	// (fragments, IPv6 fragment headers) that IPPayload does not handle.
	ErrUnsupported = errors.New("pcapfile: unsupported packet")
	// ErrTruncated means a frame is shorter than its headers say.
	ErrTruncated = errors.New("pcapfile: truncated packet")
)
