package dcsim

import (
	"errors"
	"fmt"
	"time"

	"github.com/homa-go/homa/homa/netio"
)

// Config describes a simulation: the fabric, the hosts' delays, the
// workload and how long to run. The zero value of a field means its
// default; the defaults are the simulated network of the Homa paper
// (SIGCOMM 2018, section 5) as the HomaSimulation repository configures
// it (homatransport/src/dcntopo/homaTransportConfig.ini): 9 racks of 16
// hosts, 4 spines, 10 Gbit/s host links, 40 Gbit/s fabric links, no
// propagation delay, 0.25 µs per switch and 0.5 µs of host software on
// each side.
type Config struct {
	// Racks, HostsPerRack and Spines shape the leaf-spine fabric.
	// Defaults 9, 16, 4. Hosts, when set, overrides HostsPerRack: the
	// hosts are spread over the racks (Hosts/Racks each, rounded up).
	Racks, HostsPerRack, Spines int
	Hosts                       int
	// HostMbps and FabricMbps are the host-to-ToR and ToR-to-spine link
	// rates. Defaults 10,000 and 40,000.
	HostMbps, FabricMbps int64
	// LinkDelay is every link's propagation delay (default 0),
	// SwitchDelay the time a switch takes to forward a packet's head
	// (default 250 ns).
	LinkDelay, SwitchDelay time.Duration
	// TxDelay is the host software time from a transport's decision to
	// its NIC, RxDelay from the NIC to the transport. Default 500 ns
	// each; negative means 0.
	TxDelay, RxDelay time.Duration
	// StoreAndForward makes switches receive a packet whole before
	// forwarding it. The default is cut-through: a packet leaves as
	// soon as its head is switched (and never before its tail has
	// arrived).
	StoreAndForward bool
	// ECMP picks a packet's spine by hashing its flow instead of
	// spraying packets over the spines at random.
	ECMP bool
	// BufferBytes bounds each switch egress port's queue (the packet
	// being sent excluded); a packet that does not fit is dropped.
	// Default 1 MiB. Host NIC queues are unbounded: a host's transport
	// is its own flow control.
	BufferBytes int
	// ECNBytes is the queue length above which a port marks ECN-capable
	// packets (the baseline's) at a 10 Gbit/s port; it scales with the
	// port's rate. Default 97,500 (65 full packets, DCTCP's K at 10G).
	ECNBytes int
	// MTU is the largest IP packet (default 1500); FrameOverhead the
	// bytes each packet costs on an Ethernet link beyond its IP packet:
	// header, FCS, preamble and gap (default 38).
	MTU, FrameOverhead int

	// Workload is the message-size distribution: "w1" to "w5" (default
	// w4), or "fixed:N".
	Workload string
	// Load is the offered load, a fraction of the host link rate in
	// wire bytes (headers and framing included) that each host sends.
	// Default 0.5.
	Load float64
	// Incast, when positive, adds incast bursts: IncastRate times a
	// second a random host receives an IncastSize-byte request from each
	// of Incast random other hosts at once (defaults 1,000/s and 10,000
	// bytes). Their messages are reported apart.
	Incast, IncastSize int
	IncastRate         float64
	// Duration is how long messages arrive (default 10 ms); Warmup the
	// first part whose messages are not measured (default Duration/10);
	// Drain how long the run goes on after Duration for the measured
	// messages to finish (default 2*Duration, at least 5 ms).
	Duration, Warmup, Drain time.Duration
	// Seed makes every random choice.
	Seed uint64

	// Overcommit and SchedLevels, when positive, set the Homa core's
	// grant.Config.MaxOvercommit and SchedLevels (the parameter study);
	// zero keeps the engine's defaults.
	Overcommit, SchedLevels int
	// UnschedBytes, when positive, sets the Homa core's
	// core.Config.UnschedBytes (default: the engine's, 40,000); the
	// paper's simulator used one round trip of bytes, about 10,000.
	UnschedBytes int
	// Shards, when above 1, runs each host's Homa socket as that many
	// cores, as a sharded socket of package sock runs that many
	// engines (Config.Shards there): a host handles a peer's packets,
	// and sends to the peer, in the core netio.ShardOf names for the
	// peer. The shards of a host grant from one budget of incoming
	// bytes, one core's (homa.SplitIncoming), their pacers share the
	// host's link (homa.SharedLink), and they learn one set of priority
	// cutoffs (homa.SharedCutoffs), unless ShardsShareNothing gives every
	// shard one core's budget, a pacer of its own at the link's rate and
	// cutoffs of its own, as sharded sockets had before.
	Shards             int
	ShardsShareNothing bool
	// PaceFraction is the core's pacer rate (core.Config.LinkMbps) as a
	// fraction of HostMbps: the engine's documentation asks for slightly
	// below the link's rate. Default 0.97; negative turns pacing off.
	PaceFraction float64

	// Progress, when set, is called about every ProgressEvery of
	// simulated time (default Duration/50) with the simulated time and
	// the time the run ends at the latest.
	Progress      func(now, end time.Duration)
	ProgressEvery time.Duration
}

// ErrConfig is wrapped by the errors of a Config that cannot run.
var ErrConfig = errors.New("dcsim: bad configuration")

// withDefaults fills in the defaults and checks the result.
func (c Config) withDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Racks, 9)
	def(&c.Spines, 4)
	if c.Hosts > 0 {
		c.Racks = min(c.Racks, c.Hosts)
		c.HostsPerRack = (c.Hosts + c.Racks - 1) / c.Racks
		c.Racks = (c.Hosts + c.HostsPerRack - 1) / c.HostsPerRack
	}
	def(&c.HostsPerRack, 16)
	if c.Hosts <= 0 {
		c.Hosts = c.Racks * c.HostsPerRack
	}
	if c.HostMbps <= 0 {
		c.HostMbps = 10_000
	}
	if c.FabricMbps <= 0 {
		c.FabricMbps = 40_000
	}
	if c.SwitchDelay == 0 {
		c.SwitchDelay = 250 * time.Nanosecond
	}
	for _, d := range []*time.Duration{&c.TxDelay, &c.RxDelay} {
		switch {
		case *d == 0:
			*d = 500 * time.Nanosecond
		case *d < 0:
			*d = 0
		}
	}
	c.LinkDelay = max(c.LinkDelay, 0)
	c.SwitchDelay = max(c.SwitchDelay, 0)
	def(&c.BufferBytes, 1<<20)
	def(&c.ECNBytes, 65*1500)
	def(&c.MTU, 1500)
	if c.FrameOverhead == 0 {
		c.FrameOverhead = 38
	}
	c.FrameOverhead = max(c.FrameOverhead, 0)
	if c.Workload == "" {
		c.Workload = "w4"
	}
	if c.Load == 0 {
		c.Load = 0.5
	}
	if c.Incast > 0 {
		def(&c.IncastSize, 10_000)
		if c.IncastRate <= 0 {
			c.IncastRate = 1000
		}
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Millisecond
	}
	if c.Warmup == 0 {
		c.Warmup = c.Duration / 10
	}
	if c.Drain <= 0 {
		c.Drain = max(2*c.Duration, 5*time.Millisecond)
	}
	if c.PaceFraction == 0 {
		c.PaceFraction = 0.97
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = max(c.Duration/50, time.Microsecond)
	}
	switch {
	case c.Racks > 1 && c.Spines < 1:
		return c, fmt.Errorf("%w: %d racks need a spine", ErrConfig, c.Racks)
	case c.Hosts < 2 || c.Hosts > 1<<20:
		return c, fmt.Errorf("%w: %d hosts (want 2 to 2^20)", ErrConfig, c.Hosts)
	case c.Load < 0 || c.Load > 1.5:
		return c, fmt.Errorf("%w: load %g (want 0 to 1.5)", ErrConfig, c.Load)
	case c.MTU < 576 || c.MTU > 65535:
		return c, fmt.Errorf("%w: MTU %d", ErrConfig, c.MTU)
	case c.Shards < 0 || c.Shards > netio.MaxShards:
		return c, fmt.Errorf("%w: %d shards (want 0 to %d)", ErrConfig, c.Shards, netio.MaxShards)
	case c.Warmup < 0 || c.Warmup >= c.Duration:
		return c, fmt.Errorf("%w: warmup %v of a %v run", ErrConfig, c.Warmup, c.Duration)
	}
	return c, nil
}
