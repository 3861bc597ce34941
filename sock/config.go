package sock

import (
	"fmt"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/resend"
)

// Transport selects how Homa packets travel.
type Transport int

const (
	// Raw sends Homa packets directly in IP (protocol 146), as the Linux
	// module does. It needs CAP_NET_RAW. Each raw socket is one more
	// copy of every Homa packet the host receives: the kernel hands
	// each to every raw socket of the protocol, whose filter keeps only
	// its own port's (about 2% of the rate of small RPCs per socket on
	// the machine of docs/performance.md). A host with many Homa sockets
	// receives more cheaply over UDP, which the kernel demultiplexes by
	// port.
	Raw Transport = iota
	// UDP carries each Homa packet in a UDP datagram whose port equals
	// the Homa port. It needs no privileges, but both ends must use it.
	UDP
)

func (t Transport) String() string {
	switch t {
	case Raw:
		return "raw"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// Config configures a socket. A nil *Config, and the zero value of every
// field, mean the default. The fields after Transport tune the
// user-space engine (Backend Engine); the kernel module has its own
// settings (sysctl net.homa.*).
type Config struct {
	// Backend is Engine (the default), Kernel or Auto.
	Backend Backend
	// Transport is Raw (the default) or UDP (engine only).
	Transport Transport

	// PollDuration is the longest a goroutine waiting in Recv spins on
	// the socket before it parks in the netpoller: spinning saves the
	// wake-up of a parked thread (microseconds; tens on a virtual
	// machine) at the price of CPU. Default 50 µs, as Linux Homa's
	// poll_usecs; negative never spins.
	PollDuration time.Duration
	// Polling is PollAdaptive (the default: a caller waiting for its
	// response spins; one waiting for any message, such as a server,
	// only while its requests have lately come close together, so a
	// server whose requests come seldom parks at once), PollAlways (spin
	// for PollDuration after each packet, as Linux Homa polls) or
	// PollNever (park at once: the least CPU). Spins stretch to cover
	// the waits of the recent past, up to 4 PollDurations.
	Polling Polling
	// PeerTimeout is how long a peer may say nothing about an RPC while
	// being asked (RESEND every 5 ms) before the RPC fails with
	// ErrPeerTimeout. A server still working on a request says BUSY, so
	// it is never timed out. Default 105 ms (20 RESENDs, as Linux).
	PeerTimeout time.Duration
	// UnschedBytes is how many bytes of each message are sent before the
	// receiver grants more. Default 40,000 (Linux's, sized for 25 Gbit/s;
	// about one round trip of data at the link rate is right), and 128
	// KiB to loopback peers, where the link is a copy in memory; a value
	// set here holds for every peer.
	UnschedBytes int
	// LinkMbps, when positive, paces outgoing data to this rate in
	// shortest-remaining-first order, so that a short message never
	// waits behind a long one in the queues below. Set it slightly below
	// the link's rate; zero (the default, right for loopback) sends at
	// once.
	LinkMbps int
	// Limits bound what peers can make the socket hold.
	Limits Limits
	// Net tunes the socket underneath (DSCP map, MTU, buffer sizes, UDP
	// offloads). A UDP socket bound to a loopback address always has GRO
	// off: loopback packets are already 64 KB, GRO would only add a copy.
	Net NetOptions
	// Shards, when above 1, splits the socket into that many engines
	// on one port, each with its own protocol state, lock, kernel
	// socket and reader, so that as many CPUs serve it at once with
	// nothing shared on the path of a packet: the kernel hands all the
	// packets of one peer (address and port) to one shard, and the
	// socket sends to a peer from that peer's shard. Goroutines in
	// Recv(Any) spread over the shards; run at least as many as there
	// are shards. Up to 256 shards, over UDP or raw IP (where each
	// shard's raw socket costs the host's Homa packets a clone each;
	// see netio.OpenRawGroup); the engine backend only. Limits apply
	// per shard; the shards grant from one budget of incoming bytes,
	// one engine's, and with LinkMbps pace one link between them. 0
	// and 1 mean one engine, as always. See docs/design.md, "Sharding".
	Shards int
	// Network, when set, carries the socket's packets on an in-memory
	// network instead of the host's (package memnet: for tests, with
	// loss, reordering and link rates of its choosing). Transport and
	// Net do not apply then; the backend is the engine.
	Network *memnet.Network
}

// NetOptions tune the raw IP or UDP socket under an engine socket. The
// zero value suits most hosts.
type NetOptions struct {
	// DSCP maps each Homa priority (0..7) to the DSCP value its packets
	// carry; nil means the class selectors, priority p as DSCP 8p (TOS
	// p<<5), as Linux Homa sends.
	DSCP *[8]uint8
	// MTU, when positive, overrides path MTU discovery: every packet is
	// sized for this MTU (IP header included).
	MTU int
	// ReadBuffer and WriteBuffer size the kernel's socket buffers in
	// bytes; zero picks 8 MiB (bursts of 1 MB messages), and 32 MiB to
	// read on a server socket (many clients' first packets at once).
	// Without CAP_NET_ADMIN the kernel caps them (net.core.rmem_max).
	ReadBuffer, WriteBuffer int
	// DisableGSO and DisableGRO turn off UDP segmentation offload on
	// transmit and generic receive offload on receive (UDP only; both
	// are on where the kernel supports them).
	DisableGSO, DisableGRO bool
}

// netOptions is the I/O configuration cfg asks for.
func netOptions(cfg *Config) netio.Options {
	return netio.Options{
		DSCP:        (*netio.DSCP)(cfg.Net.DSCP),
		MTU:         cfg.Net.MTU,
		ReadBuffer:  cfg.Net.ReadBuffer,
		WriteBuffer: cfg.Net.WriteBuffer,
		DisableGSO:  cfg.Net.DisableGSO,
		DisableGRO:  cfg.Net.DisableGRO,
		// The engine turns ICMP reports of undelivered packets into
		// ErrNoListener and ErrHostUnreachable.
		ReportUnreachable: true,
		ParkOften:         cfg.Polling == PollNever || cfg.PollDuration < 0,
	}
}

// Limits bound the memory and state that peers can make a socket hold,
// whatever they send: a flood from one host costs that host, not the
// others. At a limit the socket sheds the least active work of the host
// holding the most, and refuses newcomers only from that host. Zero
// means the default; each field says its own.
type Limits = contract.Limits

// Polling says how a goroutine waiting in Recv spins before it parks.
type Polling uint8

// Polling modes.
const (
	// PollAdaptive spins while waiting for a response, and while
	// waiting for any message only while such messages have lately come
	// close together: as fast as PollAlways for RPCs back to back, less
	// CPU on servers whose requests come seldom. The default.
	PollAdaptive Polling = iota
	// PollAlways spins for PollDuration after the last packet before it
	// parks, as Linux Homa polls.
	PollAlways
	// PollNever parks at once: the least CPU, a wake-up per message.
	PollNever
)

// enginePolling maps a Polling mode to the engine's.
var enginePolling = [...]homa.Polling{PollAlways: homa.PollAlways, PollAdaptive: homa.PollAdaptive, PollNever: homa.PollNever}

// engineConfig is the engine configuration cfg asks for.
func engineConfig(cfg *Config) homa.Config {
	c := homa.Config{PollDuration: cfg.PollDuration}
	if int(cfg.Polling) < len(enginePolling) {
		c.Polling = enginePolling[cfg.Polling]
	}
	c.UnschedBytes = cfg.UnschedBytes
	c.LinkMbps = cfg.LinkMbps
	c.Limits = cfg.Limits
	if cfg.PeerTimeout > 0 {
		// RESENDs go every ResendInterval ticks after the first
		// ResendTicks: choose their number to fill the timeout.
		r := resend.Config{}.WithDefaults()
		ticks := int(cfg.PeerTimeout / time.Millisecond)
		c.Resend.TimeoutResends = max(1, (ticks-max(r.ResendTicks, r.ResendInterval)+r.ResendInterval/2)/r.ResendInterval)
	}
	return c
}

// HostRawSockets counts the raw sockets of IP protocol 146 open on the
// host (in this network namespace), IPv4 and IPv6, whichever process
// holds them: the kernel clones every Homa packet that arrives over raw
// IP for each, so each costs every raw-IP socket a little (a process's
// client sockets beyond a few share one). ok is false when the
// kernel's tables cannot be read.
func HostRawSockets() (n int, ok bool) { return netio.HostRawSockets() }
