// Package netio moves Homa packets between the engine and a network.
//
// A Conn carries whole Homa packets (starting at the Homa common header)
// to and from peer hosts. Three implementations exist:
//
//   - Raw: IPv4 or IPv6 raw sockets for IP protocol 146, batched with
//     recvmmsg/sendmmsg, filtered in the kernel by a classic BPF program so
//     that a Conn sees only packets addressed to its own Homa port, and with
//     the packet priority carried per packet in DSCP / traffic class.
//   - UDP: the Homa packet as a UDP payload, for hosts where raw sockets are
//     not permitted. The UDP port equals the Homa port on both ends.
//   - Mem: an in-memory network for tests, with seeded loss, duplication,
//     reordering and delay, and optionally a rate-limited downlink per
//     host with eight strict priority queues, like a switch port.
//
// # Copies, batches and offloads
//
// A written packet may come in two parts, a header in Buf and a payload
// (Packet.Payload) pointing into the message it belongs to: socket Conns
// hand both to the kernel as iovecs, so the message is copied once, by
// the kernel, on its way to the wire. Socket Conns move up to 64
// datagrams per system call (sendmmsg, recvmmsg) from preallocated
// argument blocks, with no allocation per packet. UDP Conns also use
// the kernel's segmentation and receive offloads where it has them:
// with GSO a run of equal-sized packets to one destination leaves as
// one large datagram that the kernel or the NIC cuts up; with GRO the
// kernel hands over consecutive datagrams of a sender as one, which the
// Conn splits (see Options.DisableGSO, Options.DisableGRO and
// BorrowReader, which avoids the copy that splitting costs). ConnStats
// counts the system calls and datagrams behind the packets.
//
// A read may put the payload of a DATA packet straight where it belongs
// (see Packet.Land and Lander): the engine points Land into the message
// it expects the next packet of, and the read puts the datagram's first
// LandAt bytes, the DATA header, into Buf and what follows into Land.
// Socket Conns give the kernel Buf[:LandAt], Land and Buf[LandAt:] as
// iovecs, so the payload is copied once, by the kernel, from the socket
// into the message; the in-memory network copies the same way. The read
// does not know whose packet comes next: the engine must check that a
// packet belongs to the message its Land points into. Reads through a
// Conn's own receive area (UDP with GRO, borrowed reads) ignore Land;
// there the engine decodes packets in place instead.
//
// # Raw sockets per host
//
// The kernel gives a clone of every Homa packet that arrives over raw IP
// to every protocol 146 raw socket of the host, whose filter then drops
// it unless it is for the socket's port: 200-270 ns per socket per
// packet on the machines of docs/performance.md, so that 1,000 idle raw
// sockets took a raw ping-pong elsewhere on the host from 10 to 540 µs
// (BenchmarkRawFanout). Binding or connecting raw sockets narrows the
// kernel's match only by address, which clients of one host and server
// share. So the client Conns of a process share sockets: OpenRaw gives
// four client Conns (port 0) per network namespace, local address and
// Options a socket of their own, and puts the next ones, up to 2,048 a socket, on one socket
// whose filter passes exactly their ports (ConnStats.Shared). Such a
// Conn reads its packets from a bounded queue of its own, filled by
// whichever reader of the process reads the shared socket: its own read
// when no other is reading it (a spinning reader thus takes its packets
// with no hand-off), else a goroutine parked on the socket. That costs
// its packets one copy more; Conns with a socket of their own, servers'
// among them, read as before. RawShareStats and ConnStats.QueueDrops
// count what the sharing drops, by reason, and HostRawSockets counts the
// host's protocol 146 sockets.
//
// A Conn serves exactly one local Homa port. Raw Conns reserve their port
// host-wide (per IP family, see OpenRaw) so that two processes never hold
// the same one; UDP Conns get the same guarantee from the UDP bind.
//
// # Unreachable destinations
//
// A Conn opened with Options.ReportUnreachable (or on a memnet.Network with
// MemConfig.ReportUnreachable) also returns, from ReadBatch and
// TryReadBatch, reports that a packet it sent was not delivered: Packets
// with Unreachable set, Addr the destination of the undelivered packet and
// Buf[:N] its start as the ICMP message quoted it. That is a packet this
// Conn wrote (its source port is the Conn's own), at least its two ports
// and usually its whole common header, so the engine can tell which RPC
// it belonged to and fail that RPC at once instead of waiting for a
// timeout; it must look at Unreachable before it decodes a packet. What
// each transport can report:
//
//   - UDP: a host with no socket on the UDP port (the Homa port) answers
//     ICMP port unreachable: UnreachablePort. The kernel queues it on the
//     socket's error queue (IP_RECVERR / IPV6_RECVERR), where the Conn
//     reads it.
//   - Raw IP 146: a host with no raw socket for protocol 146 answers ICMP
//     protocol unreachable (ICMPv6: parameter problem, unrecognized next
//     header): UnreachableProtocol. A host with such a socket, even one
//     serving another port, answers nothing, so a packet to a Homa port
//     nobody serves there is simply lost; only the engine's timeout ends
//     the RPC. The kernel gives an ICMP error for protocol 146 to every
//     raw protocol 146 socket of the host: a Conn keeps only the reports
//     whose quoted Homa source port is its own and counts the others in
//     ConnStats.ReportsDiscarded.
//   - Both: routers and the sending host itself (when the next hop does
//     not answer ARP or neighbour discovery) report other failures:
//     UnreachableHost. ICMP messages that do not mean the destination is
//     unreachable (time exceeded, fragmentation needed, which the kernel
//     applies to the path MTU itself) are discarded and counted.
//   - Mem: a packet that reaches an address and port where no Conn is open
//     is reported to its writer as UnreachablePort.
//
// A UDP GSO datagram is one datagram to the network until the receiving
// host cuts it up, so a dead port answers it with one ICMP error, which
// quotes its first packet: one report for the run.
//
// Reports obey ReadBatch's bounds: they fill the same Packets, at most as
// many as offered, the quoted bytes truncated to the Buf. Reading them
// costs no system call on the hot path: the error queue is read only
// when the kernel has signalled an error (a receive or send that failed
// with the pending ICMP error, which the Conn absorbs and never returns,
// a readiness check that saw POLLERR, or a wait that woke on EPOLLERR).
// A reader parks on an epoll instance of the Conn's own, which an error
// on the socket (EPOLLERR, even without EPOLLIN: a pending error or a
// queued report) wakes like a datagram, at once if it is there before
// the reader parks. Should a wait fail for any reason but Close, the Conn reads
// without waiting and sleeps between tries (50 us doubling to 1 ms), so
// that nothing spins or wedges a reader.
//
// The socket itself is not in Go's netpoller, which registers sockets
// edge-triggered: there, every datagram would wake a thread of the
// process parked in epoll_wait, even while a goroutine spinning on the
// socket reads it (see pollFD).
package netio

import (
	"errors"
	"net/netip"

	"github.com/homa-go/homa/contract"
)

// Homa port ranges, as the Linux implementation defines them.
const (
	// MinClientPort is the first port assigned automatically to client sockets.
	MinClientPort = contract.MinClientPort
	// MaxPort is the largest Homa port.
	MaxPort = contract.MaxPort
)

// LandAt is where a landing read (see Packet.Land) splits a datagram:
// the length of a Homa DATA header (the common header and the DATA
// fields), after which comes the payload.
const LandAt = 56

// Packet is one datagram crossing a Conn.
type Packet struct {
	// Buf holds the packet. ReadBatch fills Buf[:N]; len(Buf) is the room
	// available. WriteBatch sends Buf[:N], then Payload.
	Buf []byte
	// N is the number of valid bytes in Buf.
	N int
	// Payload, when set on a written packet, is sent after Buf[:N] as
	// part of the same datagram (Scatter-gather: the engine puts a
	// packet's header in Buf and points Payload into the message, so the
	// message is not copied into a staging buffer). It is ignored on
	// read, and read methods leave it nil in the packets they return.
	// The Conn does not keep it after WriteBatch returns.
	Payload []byte
	// Land, when set on a packet given to ReadBatch or TryReadBatch of a
	// Conn that lands (see Lander), is where the read puts the bytes of
	// the datagram that follow its first LandAt (the payload of a Homa
	// DATA packet): up to len(Land) of them, the rest going on into
	// Buf[LandAt:]. Landed is how many went to Land; the packet is then
	// Buf[:LandAt], Land[:Landed], Buf[LandAt:N], in that order (N counts
	// only the bytes in Buf). A read that does not land a packet (a Conn
	// that cannot, a datagram of LandAt bytes or fewer, one the Conn had
	// to rearrange) leaves it whole in Buf[:N] with Landed 0. Writes
	// ignore both.
	Land   []byte
	Landed int
	// Addr is the peer host: the source on read, the destination on write.
	Addr netip.Addr
	// Priority (0..7, 7 highest) is the network priority of a written
	// packet. Implementations map it to DSCP / traffic class (see DSCP).
	// It is not reported on read.
	Priority uint8
	// Unreachable, on a packet returned by ReadBatch or TryReadBatch,
	// marks an ICMP report instead of a Homa packet from Addr: a packet
	// this Conn sent to Addr could not be delivered. Buf[:N] then holds the
	// start of that undelivered Homa packet as the ICMP message quoted it
	// (at least the 4 bytes of the two ports; usually the whole common
	// header, which names the sender id). Only Conns opened with
	// ReportUnreachable return such reports. It is ignored on write.
	Unreachable Unreachable
}

// Bytes returns the valid part of Buf: the whole packet as read (less
// what a landing read put in Land), or the part of a written packet that
// precedes its Payload.
func (p *Packet) Bytes() []byte { return p.Buf[:p.N] }

// Len is the size of the packet on the wire (Homa header onward):
// N plus the length of Payload.
func (p *Packet) Len() int { return p.N + len(p.Payload) }

// Conn is a bound packet endpoint for one Homa port.
//
// ReadBatch may be called from one goroutine at a time; WriteBatch is safe
// for concurrent use. Close unblocks a pending ReadBatch, which then returns
// an error that wraps net.ErrClosed.
type Conn interface {
	// ReadBatch blocks until at least one packet arrives, then fills
	// pkts[:n] with as many as are ready. It discards (and counts) packets
	// shorter than the Homa common header, packets for another port and
	// packets larger than the Buf offered (with its Land, when the read
	// lands: see Packet.Land); when it does, it may exchange Buf slices,
	// each with its Land, among the elements of pkts (it never drops or
	// adds one).
	// With reports enabled (Options.ReportUnreachable), a report of an
	// undelivered packet counts as a packet: see Packet.Unreachable.
	ReadBatch(pkts []Packet) (n int, err error)
	// WriteBatch sends pkts in order and returns how many were sent.
	// Each packet goes as one datagram of Buf[:N] followed by Payload.
	WriteBatch(pkts []Packet) (n int, err error)
	// LocalAddr is the local host address (may be unspecified).
	LocalAddr() netip.Addr
	// Port is the Homa port this Conn serves.
	Port() uint16
	// MaxPacket is the largest Homa packet (common header onward, N
	// plus the length of Payload) that can be written to dst without IP
	// fragmentation: the path MTU less the IP (and, for UDP, UDP)
	// headers, or Options.MTU when set. The engine segments messages to
	// fit it; it calls this once per peer.
	MaxPacket(dst netip.Addr) int
	// Close releases the socket and the port. It is idempotent.
	Close() error
}

// Poller is an optional Conn capability for receivers that busy-poll:
// one goroutine may spin on TryReadBatch while another is parked in
// WaitReadable, ready to take over when the spinning stops.
type Poller interface {
	// TryReadBatch is ReadBatch that returns 0, nil at once when nothing
	// is ready (or another read is in progress).
	TryReadBatch(pkts []Packet) (n int, err error)
	// WaitReadable blocks until a packet or a report (see
	// Packet.Unreachable) is ready to be read, without reading it, or the
	// Conn is closed (an error wrapping net.ErrClosed). It may return when
	// another goroutine has already taken the packet.
	WaitReadable() error
}

// Queued is an optional Conn capability: Queued reports whether a
// packet waits to be read, without reading it or waiting. A spinning
// reader of another Conn of the process asks it of a Conn whose reader
// is parked (see homa's "One processor").
type Queued interface {
	Queued() bool
}

// InProcess is an optional Conn capability: it reports whether the
// Conn's packets are delivered by goroutines and timers of this process
// (the in-memory network) rather than by the kernel. A goroutine that
// spins on such a Conn must yield the processor for them to run.
type InProcess interface {
	InProcess() bool
}

// Lander is an optional Conn capability: Lands reports whether ReadBatch
// and TryReadBatch honour Packet.Land.
type Lander interface {
	Lands() bool
}

// BorrowReader is an optional Conn capability: reads that lend the
// Conn's own receive buffers instead of filling the caller's, for a
// receiver that decodes packets in place. It matters most to UDP Conns
// with GRO (see Options.DisableGRO): the kernel hands them one datagram
// holding many packets, which ReadBatch splits by copying each packet
// into a Buf of the caller's, while ReadBorrowed returns them where they
// lie, so a packet is copied once on its way from the wire to the
// message.
//
// A packet returned stays valid until the next call of any read method
// of the Conn (ReadBatch, TryReadBatch, ReadBorrowed, TryReadBorrowed)
// or Close, whichever comes first; then the Conn reuses its memory. Its
// Buf is a slice of the Conn's memory with len(Buf) == N: the Buf
// offered in pkts is ignored and replaced, so a caller that mixes both
// kinds of read must give ReadBatch Bufs of its own again. These reads
// land nothing: they ignore Packet.Land and set Landed to 0. Otherwise the
// methods behave as ReadBatch and Poller.TryReadBatch do: the same
// discards, reports and errors. Every Conn of this package has it; a
// socket Conn without GRO reads into buffers of its own (1 MB, at the
// first borrowed read) only for these methods.
type BorrowReader interface {
	// ReadBorrowed is ReadBatch with borrowed buffers.
	ReadBorrowed(pkts []Packet) (n int, err error)
	// TryReadBorrowed is Poller.TryReadBatch with borrowed buffers.
	TryReadBorrowed(pkts []Packet) (n int, err error)
}

// Errors of this package; wrapped errors support errors.Is.
var (
	// ErrPermission means the process may not open raw sockets. Use UDP
	// encapsulation, or grant CAP_NET_RAW.
	ErrPermission = contract.ErrPermission
	// ErrPortInUse means another socket on this host holds the Homa port.
	ErrPortInUse = contract.ErrPortInUse
	// ErrNoPorts means every client port is taken.
	ErrNoPorts = errors.New("netio: no free Homa client port")
	// ErrBadAddr means an address is invalid, unspecified where a host is
	// needed, or of the other IP family than the Conn.
	ErrBadAddr = errors.New("netio: bad or wrong-family address")
	// ErrBadPacket means a Packet given to WriteBatch or ReadBatch is
	// unusable: N outside 4..len(Buf) (the destination port must be
	// in Buf), an empty Buf to read into, or a packet (N plus the length
	// of Payload) larger than the network carries.
	ErrBadPacket = errors.New("netio: bad packet")
)

// ConnStats are cumulative packet counts of one Conn.
type ConnStats struct {
	// Read and Written count packets returned by ReadBatch and
	// TryReadBatch, and packets accepted by WriteBatch. Reports are not
	// in Read.
	Read, Written uint64
	// Discarded counts received packets dropped before they were
	// returned: shorter than the Homa common header, addressed to another
	// port, or truncated because they did not fit the Buf offered.
	Discarded uint64
	// Reports counts reports of undelivered packets returned by ReadBatch
	// and TryReadBatch (see Packet.Unreachable).
	Reports uint64
	// ReportsDiscarded counts error reports dropped before they were
	// returned: for a packet from another Homa port (a raw socket sees
	// the ICMP errors of every protocol 146 socket on the host), not a
	// destination-unreachable message (time exceeded, fragmentation
	// needed, a local error), or too short to name the two ports.
	ReportsDiscarded uint64

	// SendCalls counts the sendmmsg calls that sent at least one
	// datagram and SendDatagrams the datagrams they sent. With UDP GSO
	// one datagram carries several packets, so Written/SendCalls is the
	// packets per system call and Written/SendDatagrams the packets per
	// datagram. RecvCalls and RecvDatagrams count the same on the receive
	// side: recvmmsg calls that returned datagrams (reads of the error
	// queue not included) and those datagrams, of which a UDP GRO one
	// carries several packets. In-memory Conns leave all four zero.
	SendCalls, SendDatagrams uint64
	RecvCalls, RecvDatagrams uint64
	// GSOFallbacks counts GSO datagrams the kernel refused (EIO, EINVAL),
	// whose packets were then sent one per datagram; the first refusal
	// turns GSO off for the Conn.
	GSOFallbacks uint64
	// GSO and GRO say whether the Conn uses UDP segmentation offload on
	// transmit and generic receive offload on receive now (see
	// Options.DisableGSO and Options.DisableGRO).
	GSO, GRO bool
	// QueueDrops counts received packets the kernel dropped at the socket
	// before they could be read, its receive queue being full (the
	// socket's drop count, SO_MEMINFO), as of the Stats call; for a Conn
	// that shares its socket (Shared), the packets its own queue had no
	// room for. In-memory Conns leave it zero.
	QueueDrops uint64
	// Shared says that the Conn reads through a raw socket it shares with
	// other Conns of the process (see OpenRaw). Its system call counts
	// are then zero: the calls are the shared socket's.
	Shared bool
}

// StatsConn is an optional Conn capability: counters read without locks.
type StatsConn interface {
	// Stats returns the counts so far.
	Stats() ConnStats
}

// DSCP maps a Homa priority (0..7) to the 6-bit DSCP value carried in the
// IPv4 TOS byte (DSCP << 2) or the IPv6 traffic class. The default is the
// class selector CSp: priority p travels as TOS p << 5, as Linux Homa sends.
type DSCP [8]uint8

// DefaultDSCP is the class-selector map: priority p -> DSCP 8p (TOS p<<5).
var DefaultDSCP = DSCP{0, 8, 16, 24, 32, 40, 48, 56}

// TOS is the IPv4 TOS / IPv6 traffic class byte for priority p.
func (m *DSCP) TOS(p uint8) uint8 { return m[p&7] << 2 }

// Options tune a raw or UDP Conn. The zero value is sensible.
type Options struct {
	// DSCP maps priorities to DSCP values; nil means DefaultDSCP.
	DSCP *DSCP
	// MTU, when positive, overrides path MTU discovery: every packet is
	// sized for this MTU (IP header included).
	MTU int
	// ReadBuffer and WriteBuffer size the socket buffers in bytes; zero
	// picks 8 MiB (bursts of 1 MB messages), and 32 MiB to read on a
	// server port (the first packets of many clients' requests at once).
	ReadBuffer, WriteBuffer int
	// ReportUnreachable makes the Conn return ICMP destination-unreachable
	// reports for packets it sent, as Packets with Unreachable set. It
	// sets IP_RECVERR / IPV6_RECVERR on the socket; the errors the kernel
	// then attaches to later receives and sends are absorbed by the Conn
	// (a send they fail is retried), never returned. See the package
	// documentation for what each transport can report.
	ReportUnreachable bool
	// DisableGSO turns off UDP generic segmentation offload (UDP_SEGMENT)
	// for a UDP Conn. Where the kernel supports it (probed at open) a UDP
	// Conn otherwise sends a run of consecutive packets of one
	// WriteBatch to the same destination, with the same size (the last
	// may be shorter) and priority, as one large datagram that the kernel
	// or the NIC cuts into those packets: one trip through the stack for
	// up to 64 packets or 64 KB. The receiver sees ordinary datagrams. A
	// GSO send the kernel later refuses is sent one packet per datagram
	// and turns GSO off for the Conn (ConnStats.GSOFallbacks). Raw Conns
	// ignore it.
	DisableGSO bool
	// DisableGRO turns off UDP generic receive offload (UDP_GRO) for a
	// UDP Conn. Where the kernel allows it (probed at open) the kernel
	// may otherwise hand a UDP Conn consecutive datagrams of one sender
	// as one, which the Conn splits back into packets: fewer trips
	// through the stack and fewer system calls, most of all when the
	// sender uses GSO. The Conn then reads into buffers of its own (one
	// MB, allocated at the first read) and ReadBatch copies each packet
	// into the caller's Buf; BorrowReader avoids that copy. It lands no
	// packet either (see Lander). Raw Conns ignore it.
	DisableGRO bool
	// ParkOften says that the Conn's readers park at every wait rather
	// than spin on TryReadBatch first. A socket Conn then keeps its
	// socket registered for the wake-up between waits, which saves the
	// two system calls of registering it at each wait and taking it out
	// after; otherwise the registration is in only while a reader
	// parks, since while it is in the kernel runs its wake-up callback
	// for every packet that arrives and every one sent.
	ParkOften bool
}
