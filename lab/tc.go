package lab

import (
	"fmt"

	"github.com/homa-go/homa/homa/netio"
)

// Priorities is the number of Homa priority levels, and of queues on each
// switch port.
const Priorities = 8

// DefaultMTU is the MTU of a Link whose MTU is zero: Ethernet's.
const DefaultMTU = 1500

// The MTUs a Link accepts.
const (
	minMTU = 1280 // IPv6's minimum
	maxMTU = 65000
)

// ethHeader is the Ethernet header tc counts in a packet's length.
const ethHeader = 14

// Link is the queueing on one host's downlink, the egress of its switch
// port.
type Link struct {
	// Rate is the link rate. tc counts Ethernet frames without preamble,
	// FCS and gap, so the wire rate of a real link is about 1.6% higher
	// for full frames.
	Rate Rate
	// Buffer is the byte limit of each of the Priorities queues; a
	// packet arriving at a full queue is dropped.
	Buffer int
	// Burst is how many bytes may leave back to back after the link has
	// been idle; zero means two full frames. A real port has none; tbf
	// needs at least one full frame.
	Burst int
	// MTU is the largest IP packet on the link, and on the host's
	// interface; zero means DefaultMTU. Jumbo frames (9000) cut the
	// packet rate, and so the CPU the lab needs, six-fold.
	MTU int
}

// mtu is l's MTU.
func (l Link) mtu() int {
	if l.MTU == 0 {
		return DefaultMTU
	}
	return l.MTU
}

// frame is the length tc counts for a full-sized packet on l.
func (l Link) frame() int { return l.mtu() + ethHeader }

// burst is l's burst in bytes.
func (l Link) burst() int {
	if l.Burst == 0 {
		return 2 * l.frame()
	}
	return l.Burst
}

// DefaultBuffer is the per-queue buffer a Lab uses by default: a few
// hundred kilobytes, like a shallow-buffered datacenter switch port.
const DefaultBuffer = 256 << 10

// Handles of the qdiscs tcScript makes. tc reads them in hex.
const (
	tbfHandle  = 0x1  // root: the rate limiter
	htbHandle  = 0x10 // its child: the priority queues
	fifoHandle = 0x20 // 0x20+p: the fifo of Homa priority p
)

// Class is the htb class ("10:<p+1>") of Homa priority p on a switch
// port. Its counters (tc -s class show) count the packets of that
// priority.
func Class(p int) string { return fmt.Sprintf("%x:%x", htbHandle, p+1) }

// classPrio is the htb priority of the class of Homa priority p: htb
// serves 0 first, Homa sends its most urgent packets at 7.
func classPrio(p int) int { return Priorities - 1 - p }

// check reports what is wrong with l.
func (l Link) check() error {
	if l.Rate < minRate || l.Rate > maxRate {
		return fmt.Errorf("lab: link rate %v out of range %v..%v", l.Rate, Rate(minRate), Rate(maxRate))
	}
	if l.MTU != 0 && (l.MTU < minMTU || l.MTU > maxMTU) {
		return fmt.Errorf("lab: MTU %d out of range %d..%d", l.MTU, minMTU, maxMTU)
	}
	if l.Buffer < l.frame() {
		return fmt.Errorf("lab: buffer of %d bytes is below one frame (%d)", l.Buffer, l.frame())
	}
	if l.Burst != 0 && l.Burst < l.frame() {
		return fmt.Errorf("lab: burst of %d bytes is below one frame (%d)", l.Burst, l.frame())
	}
	return nil
}

// tcScript returns the tc commands, for "tc -batch", that give dev the
// queueing of l with packets classified by the DSCP values of m: a tbf
// root at l.Rate whose child is an htb with one strict-priority class per
// Homa priority, each with a bfifo of l.Buffer bytes, and u32 filters on
// the IPv4 TOS byte and IPv6 traffic class (the DSCP bits; ECN ignored).
// Packets no filter matches go to the highest class.
func tcScript(dev string, l Link, m *netio.DSCP) []string {
	// The classes must never be what limits the rate, or a class out of
	// tokens would let a lower one pass it: tbf limits, the classes get
	// ten times the rate.
	classRate := uint64(l.Rate) * 10
	s := []string{
		fmt.Sprintf("qdisc replace dev %s root handle %x: tbf rate %dbit burst %d limit %d",
			dev, tbfHandle, uint64(l.Rate), l.burst(), l.Buffer),
		fmt.Sprintf("qdisc add dev %s parent %x:1 handle %x: htb default %x",
			dev, tbfHandle, htbHandle, Priorities),
	}
	for p := range Priorities {
		s = append(s,
			fmt.Sprintf("class add dev %s parent %x: classid %s htb rate %dbit ceil %dbit burst 64k cburst 64k prio %d quantum %d",
				dev, htbHandle, Class(p), classRate, classRate, classPrio(p), l.frame()),
			fmt.Sprintf("qdisc add dev %s parent %s handle %x: bfifo limit %d",
				dev, Class(p), fifoHandle+p, l.Buffer))
	}
	const dscpMask = 0xfc // the TOS byte without its two ECN bits
	for p := range Priorities {
		tos := m.TOS(uint8(p))
		s = append(s,
			fmt.Sprintf("filter add dev %s parent %x: protocol ip prio 1 u32 match ip tos 0x%02x 0x%02x flowid %s",
				dev, htbHandle, tos, dscpMask, Class(p)),
			fmt.Sprintf("filter add dev %s parent %x: protocol ipv6 prio 2 u32 match ip6 priority 0x%02x 0x%02x flowid %s",
				dev, htbHandle, tos, dscpMask, Class(p)))
	}
	return s
}
