package metrics

import (
	"strconv"
	"strings"

	"github.com/homa-go/homa/sock"
	"github.com/prometheus/client_golang/prometheus"
)

// namespace prefixes every metric name.
const namespace = "homa"

// Collector exports the statistics of one Homa socket or endpoint. Each
// Collect takes one snapshot and reports every metric from it, so the
// values of one scrape are consistent with each other (up to RPCs that
// race with the snapshot). It is safe for concurrent use.
type Collector struct {
	stats    func() sock.Stats
	families []family
	latency  *prometheus.Desc
	sizes    *prometheus.Desc
}

// family is one metric name: its description, its type, and how to read
// its values (one per label combination) from a snapshot.
type family struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	read func(s *sock.Stats, emit emitFunc)
}

// emitFunc reports one value with its label values, in the order of the
// family's label names.
type emitFunc func(v float64, labelValues ...string)

// NewCollector returns a collector that reads the statistics of one
// socket or endpoint through stats, for example sock.Socket.Stats or
// sock.Socket.Stats. constLabels are added to every metric; give each
// socket registered with one registry different ones (such as
// {"socket": "server"}). The collector registers itself nowhere: the
// application adds it to the registry of its choice.
func NewCollector(stats func() sock.Stats, constLabels prometheus.Labels) *Collector {
	c := &Collector{stats: stats}
	for _, d := range definitions {
		c.families = append(c.families, family{
			desc: prometheus.NewDesc(namespace+"_"+d.name, d.help, d.labels, constLabels),
			typ:  d.typ,
			read: d.read,
		})
	}
	c.latency = prometheus.NewDesc(namespace+"_rpc_duration_seconds",
		"Time from sending a request to receiving the whole response, of client RPCs that completed, by size class (the larger of request and response: up to 1k, 10k, 100k or 1m bytes).",
		[]string{"size_class"}, constLabels)
	c.sizes = prometheus.NewDesc(namespace+"_message_size_bytes",
		"Lengths of complete messages, by direction and kind (clients send requests and receive responses, servers the reverse).",
		[]string{"direction", "kind"}, constLabels)
	return c
}

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range c.families {
		ch <- f.desc
	}
	ch <- c.latency
	ch <- c.sizes
}

// Collect takes a snapshot of the statistics and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, f := range c.families {
		f.read(&s, func(v float64, lv ...string) {
			ch <- prometheus.MustNewConstMetric(f.desc, f.typ, v, lv...)
		})
	}
	for sc := range sock.NumSizeClasses {
		ch <- constHistogram(c.latency, &s.Latency[sc], 1e9, sc.String())
	}
	for d := range sock.NumDirections {
		for k := range sock.NumKinds {
			ch <- constHistogram(c.sizes, &s.MessageSizes[d][k], 1, d.String(), k.String())
		}
	}
}

// constHistogram converts a snapshot into a Prometheus histogram, its
// bounds and sum divided by perUnit (1e9 turns nanoseconds into seconds).
// Prometheus buckets are cumulative; the overflow bucket is the implicit
// +Inf.
func constHistogram(desc *prometheus.Desc, h *sock.Histogram, perUnit float64, labelValues ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[float64(b)/perUnit] = cum
	}
	return prometheus.MustNewConstHistogram(desc, h.Count, float64(h.Sum)/perUnit, buckets, labelValues...)
}

// definition describes one metric other than the histograms.
type definition struct {
	name   string
	help   string
	typ    prometheus.ValueType
	labels []string
	read   func(s *sock.Stats, emit emitFunc)
}

// counter and gauge define a metric without labels.
func counter(name, help string, v func(s *sock.Stats) uint64) definition {
	return definition{name: name, help: help, typ: prometheus.CounterValue,
		read: func(s *sock.Stats, emit emitFunc) { emit(float64(v(s))) }}
}

func gauge(name, help string, v func(s *sock.Stats) float64) definition {
	return definition{name: name, help: help, typ: prometheus.GaugeValue,
		read: func(s *sock.Stats, emit emitFunc) { emit(v(s)) }}
}

// byType defines a counter by packet type, read from one of the maps of
// Stats. Every type is reported, zero or not.
func byType(name, help string, m func(s *sock.Stats) map[sock.PacketType]uint64) definition {
	return definition{name: name, help: help, typ: prometheus.CounterValue, labels: []string{"type"},
		read: func(s *sock.Stats, emit emitFunc) {
			vals := m(s)
			for i, t := range sock.PacketTypes {
				emit(float64(vals[t]), typeLabels[i])
			}
		}}
}

// byRole defines a metric with the label role, client and server.
func byRole(name, help string, typ prometheus.ValueType, client, server func(s *sock.Stats) float64) definition {
	return definition{name: name, help: help, typ: typ, labels: []string{"role"},
		read: func(s *sock.Stats, emit emitFunc) {
			emit(client(s), "client")
			emit(server(s), "server")
		}}
}

// typeLabels are the packet type label values: the type names in lower
// case.
var typeLabels = func() []string {
	var l []string
	for _, t := range sock.PacketTypes {
		l = append(l, strings.ToLower(t.String()))
	}
	return l
}()

// dropReasons are every reason a packet is dropped for.
var dropReasons = func() []sock.DropReason {
	var l []sock.DropReason
	for r := range sock.NumDropReasons {
		l = append(l, r)
	}
	return l
}()

// priorityLabels are "0" to "7".
var priorityLabels = func() []string {
	var l []string
	for p := range sock.NumPriorities {
		l = append(l, strconv.Itoa(p))
	}
	return l
}()

// u turns a uint64 into a float64 reader result.
func u(v uint64) float64 { return float64(v) }

// definitions are the metrics of a socket besides the histograms, in the
// order of doc.go.
var definitions = []definition{
	// Packets.
	byType("packets_sent_total", "Homa packets sent, by type.",
		func(s *sock.Stats) map[sock.PacketType]uint64 { return s.TxPackets }),
	byType("packets_received_total", "Homa packets received with a valid type, by type (including those dropped later).",
		func(s *sock.Stats) map[sock.PacketType]uint64 { return s.RxPackets }),
	byType("packet_bytes_sent_total", "Bytes of Homa packets sent (Homa header included, IP header not), by type.",
		func(s *sock.Stats) map[sock.PacketType]uint64 { return s.TxBytes }),
	byType("packet_bytes_received_total", "Bytes of Homa packets received (Homa header included, IP header not), by type.",
		func(s *sock.Stats) map[sock.PacketType]uint64 { return s.RxBytes }),
	{name: "priority_packets_sent_total", help: "Homa packets sent, by network priority (0 lowest, 7 highest).",
		typ: prometheus.CounterValue, labels: []string{"priority"},
		read: func(s *sock.Stats, emit emitFunc) {
			for p, n := range s.TxPriority {
				emit(u(n), priorityLabels[p])
			}
		}},
	{name: "packets_dropped_total", help: "Received packets dropped, by reason.",
		typ: prometheus.CounterValue, labels: []string{"reason"},
		read: func(s *sock.Stats, emit emitFunc) {
			for _, r := range dropReasons {
				emit(u(s.Drops[r]), r.String())
			}
		}},
	counter("duplicate_packets_total", "Received DATA packets that carried no new bytes.",
		func(s *sock.Stats) uint64 { return s.DuplicatePackets }),
	{name: "landed_packets_total", help: "DATA packets whose payload a read put where the socket expected the next packet of a message: where they belong (in_place, not copied again) or not (moved).",
		typ: prometheus.CounterValue, labels: []string{"placed"},
		read: func(s *sock.Stats, emit emitFunc) {
			emit(u(s.LandedPackets), "in_place")
			emit(u(s.MovedPackets), "moved")
		}},
	counter("retransmissions_total", "Retransmissions of message data (one per range asked for by a RESEND, or restart of a request).",
		func(s *sock.Stats) uint64 { return s.Retransmits }),
	counter("resent_packets_total", "DATA packets sent again by retransmissions.",
		func(s *sock.Stats) uint64 { return s.ResentPackets }),
	counter("resends_issued_total", "RESEND packets issued to ask for missing data.",
		func(s *sock.Stats) uint64 { return s.ResendsSent }),
	counter("peer_timeouts_total", "RPCs (client and server) ended because their peer said nothing about them through the RESENDs of a timeout.",
		func(s *sock.Stats) uint64 { return s.PeerTimeouts }),
	counter("resends_ignored_total", "RESENDs left unanswered because what they asked for was retransmitted less than a resend interval before, or the message's retransmission budget was spent.",
		func(s *sock.Stats) uint64 { return s.ResendsIgnored }),
	counter("timer_wakeups_total", "Times the endpoint's timer woke it to run protocol deadlines (none while idle).",
		func(s *sock.Stats) uint64 { return s.TimerWakeups }),
	{name: "receive_path_events_total", help: "The way of messages from the socket to the application: readers that parked on the socket (a thread wake-up each), goroutines in Recv that took the socket from the background reader, messages handed to another goroutine, timer wake-ups that found nothing due, and runtime timers set (each may wake a thread of an idle process).",
		typ: prometheus.CounterValue, labels: []string{"event"},
		read: func(s *sock.Stats, emit emitFunc) {
			emit(u(s.ReaderParks), "park")
			emit(u(s.ReaderSteals), "steal")
			emit(u(s.Handoffs), "handoff")
			emit(u(s.TimerWakeupsVain), "timer_vain")
			emit(u(s.TimerArms), "timer_set")
		}},
	counter("socket_writes_total", "Writes of packets to the socket: a system call each (sendmmsg where the transport batches).",
		func(s *sock.Stats) uint64 { return s.Writes }),
	{name: "io_errors_total", help: "Errors reading or writing the socket, by operation.",
		typ: prometheus.CounterValue, labels: []string{"op"},
		read: func(s *sock.Stats, emit emitFunc) {
			emit(u(s.ReadErrors), "read")
			emit(u(s.WriteErrors), "write")
		}},

	// RPCs.
	byRole("rpcs_started_total", "RPCs started: client RPCs sent, server RPCs whose request began to arrive.", prometheus.CounterValue,
		func(s *sock.Stats) float64 { return u(s.RPCsStarted) },
		func(s *sock.Stats) float64 { return u(s.ServerRPCsStarted) }),
	byRole("rpcs_completed_total", "RPCs completed: client RPCs whose response arrived whole, server RPCs answered.", prometheus.CounterValue,
		func(s *sock.Stats) float64 { return u(s.RPCsCompleted) },
		func(s *sock.Stats) float64 { return u(s.ServerRPCsCompleted) }),
	counter("rpc_timeouts_total", "Client RPCs failed because their server stopped answering.",
		func(s *sock.Stats) uint64 { return s.RPCTimeouts }),
	counter("rpcs_aborted_total", "Client RPCs ended by Abort.",
		func(s *sock.Stats) uint64 { return s.RPCsAborted }),
	counter("rpcs_unreachable_total", "Client RPCs failed at once by an ICMP report (no listener, host unreachable).",
		func(s *sock.Stats) uint64 { return s.RPCsUnreachable }),
	counter("requests_delivered_total", "Requests handed whole to the server application.",
		func(s *sock.Stats) uint64 { return s.RequestsReceived }),
	counter("server_rpcs_acked_total", "Answered server RPCs freed on the client's acknowledgment.",
		func(s *sock.Stats) uint64 { return s.ServerRPCsFreed }),
	counter("server_rpcs_unreachable_total", "Server RPCs freed because the network reported their client unreachable.",
		func(s *sock.Stats) uint64 { return s.ServersUnreachable }),
	counter("server_rpcs_reclaimed_total", "Answered server RPCs freed after the client stayed silent.",
		func(s *sock.Stats) uint64 { return s.Reclaimed }),
	counter("rtt_samples_total", "Round trips measured to stretch a slow peer's loss-recovery timers.",
		func(s *sock.Stats) uint64 { return s.RTTSamples }),
	counter("resends_deferred_total", "RESENDs that waited for a turn: their peer's budget (one a tick) or the socket's was spent.",
		func(s *sock.Stats) uint64 { return s.ResendsDeferred }),
	counter("resends_unneeded_total", "RESENDs for responses that proved not needed (answered BUSY, or the bytes came in their first transmission); each backs the RESEND timing toward that server off.",
		func(s *sock.Stats) uint64 { return s.ResendsUnneeded }),
	counter("need_acks_deferred_total", "NEED_ACKs that waited for a turn: their peer's budget for the tick was spent.",
		func(s *sock.Stats) uint64 { return s.NeedAcksDeferred }),
	counter("timers_run_total", "Protocol timers that came due and ran (RPCs', peers', and the RESEND and NEED_ACK turns).",
		func(s *sock.Stats) uint64 { return s.TimersRun }),
	byRole("request_bytes_total", "Request bytes: sent by clients, received by servers.", prometheus.CounterValue,
		func(s *sock.Stats) float64 { return u(s.RequestBytesSent) },
		func(s *sock.Stats) float64 { return u(s.RequestBytesReceived) }),
	byRole("response_bytes_total", "Response bytes: received by clients, sent by servers.", prometheus.CounterValue,
		func(s *sock.Stats) float64 { return u(s.ResponseBytesReceived) },
		func(s *sock.Stats) float64 { return u(s.ResponseBytesSent) }),
	byRole("active_rpcs", "RPCs the socket holds now.", prometheus.GaugeValue,
		func(s *sock.Stats) float64 { return float64(s.ClientRPCs) },
		func(s *sock.Stats) float64 { return float64(s.ServerRPCs) }),
	gauge("peers", "Hosts the socket keeps state for.",
		func(s *sock.Stats) float64 { return float64(s.Peers) }),

	// Resource accounting.
	gauge("receive_memory_bytes", "Receive storage committed for incoming messages (arriving, or requests not yet received by the application).",
		func(s *sock.Stats) float64 { return float64(s.RecvMemory) }),
	gauge("incoming_server_rpcs", "Server RPCs whose request is still arriving.",
		func(s *sock.Stats) float64 { return float64(s.IncomingRPCs) }),
	gauge("pending_replies", "Server RPCs whose request is complete and not yet answered.",
		func(s *sock.Stats) float64 { return float64(s.PendingReplies) }),
	{name: "requests_recalled_total", help: "Requests refused at the bound of requests awaiting replies that the server asked for again when replies made room (recalled), and those whose client did not send them again in time (lapsed).",
		typ: prometheus.CounterValue, labels: []string{"outcome"},
		read: func(s *sock.Stats, emit emitFunc) {
			emit(u(s.Recalled), "recalled")
			emit(u(s.RecallsLapsed), "lapsed")
		}},
	counter("messages_shed_total", "Incoming messages discarded to make room for others (the heaviest peer's least active first).",
		func(s *sock.Stats) uint64 { return s.Shed }),
	counter("grants_revoked_total", "Incoming messages that lost their grant because their sender left granted bytes unsent.",
		func(s *sock.Stats) uint64 { return s.GrantsRevoked }),
	counter("grants_deferred_total", "Grants held back for lack of receive memory.",
		func(s *sock.Stats) uint64 { return s.GrantsDeferred }),
	counter("peers_evicted_total", "Idle peers dropped from a full peer table.",
		func(s *sock.Stats) uint64 { return s.PeersEvicted }),
	counter("peers_expired_total", "Peers let go after a minute with nothing pending.",
		func(s *sock.Stats) uint64 { return s.PeersExpired }),
	counter("seen_expired_total", "Records of a client port's finished RPC ids let go after the port was silent long enough.",
		func(s *sock.Stats) uint64 { return s.SeenExpired }),
	counter("seen_evicted_total", "Records of a client port's finished RPC ids forgotten to make room in a full table.",
		func(s *sock.Stats) uint64 { return s.SeenEvicted }),
	gauge("seen_clients", "Client ports whose finished RPC ids the server remembers.",
		func(s *sock.Stats) float64 { return float64(s.SeenClients) }),

	// Grants (receiver side).
	counter("grants_sent_total", "GRANT packets the SRPT scheduler decided to send.",
		func(s *sock.Stats) uint64 { return s.GrantsSent }),
	counter("granted_bytes_total", "Bytes by which grants raised what senders may send (unscheduled bytes not included).",
		func(s *sock.Stats) uint64 { return s.Grants.GrantedBytes }),
	counter("fifo_grants_total", "Grants made by the FIFO share to the oldest message.",
		func(s *sock.Stats) uint64 { return s.Grants.FIFOGrants }),
	counter("fifo_granted_bytes_total", "Bytes granted by the FIFO share.",
		func(s *sock.Stats) uint64 { return s.Grants.FIFOBytes }),
	gauge("grantable_messages", "Incoming messages that still need grants.",
		func(s *sock.Stats) float64 { return float64(s.Grants.Grantable) }),
	gauge("incoming_bytes", "Bytes granted or sent unscheduled but not yet received, over all incoming messages.",
		func(s *sock.Stats) float64 { return float64(s.Grants.Incoming) }),
	gauge("incoming_limit_bytes", "The bound on incoming_bytes that grants keep to now: the grant scheduler's MaxIncoming, or, for a sharded socket, the shards' floors and what their shared budget lends them.",
		func(s *sock.Stats) float64 { return float64(s.Grants.Limit) }),
	gauge("incoming_lent_bytes", "For a sharded socket, the bytes the shards' shared incoming budget lends them now beyond their floors (0 for one engine).",
		func(s *sock.Stats) float64 { return float64(s.IncomingLent) }),

	// Pacer (sender side; zero unless the socket paces).
	gauge("pacer_queue_messages", "Outgoing messages waiting in the pacer's queue.",
		func(s *sock.Stats) float64 { return float64(s.Pacer.Queued) }),
	gauge("pacer_queue_bytes", "Bytes left to send in the messages of the pacer's queue.",
		func(s *sock.Stats) float64 { return float64(s.Pacer.QueuedBytes) }),
	counter("pacer_packets_total", "Packets charged to the pacer's link budget.",
		func(s *sock.Stats) uint64 { return s.Pacer.Sends }),
	counter("pacer_bytes_total", "Bytes (IP header included) charged to the pacer's link budget.",
		func(s *sock.Stats) uint64 { return s.Pacer.SentBytes }),
	counter("pacer_throttled_total", "Times the pacer held a packet back for the link budget.",
		func(s *sock.Stats) uint64 { return s.Pacer.Throttled }),
	counter("pacer_fifo_picks_total", "Packets the pacer sent from the oldest message for its FIFO share.",
		func(s *sock.Stats) uint64 { return s.Pacer.FIFOPicks }),
	counter("pacer_link_slices_total", "For a sharded socket, slices of the shared link's transmit time its shards' pacers took (zero for one engine).",
		func(s *sock.Stats) uint64 { return s.Pacer.Slices }),
	counter("pacer_link_writes_total", "For a sharded socket, writes of the shared link's account by its shards' pacers: slices taken, packets added one by one, slices given back in part (zero for one engine).",
		func(s *sock.Stats) uint64 { return s.Pacer.Slices + s.Pacer.LinkAdds + s.Pacer.Returns }),
}

// BufferCollector exports the statistics of the process's message buffer
// pool, which every socket shares. Register one per process.
type BufferCollector struct {
	descs [len(bufferDefs)]*prometheus.Desc
}

// NewBufferCollector returns a collector of the buffer pool's statistics.
func NewBufferCollector(constLabels prometheus.Labels) *BufferCollector {
	c := &BufferCollector{}
	for i, d := range bufferDefs {
		c.descs[i] = prometheus.NewDesc(namespace+"_"+d.name, d.help, nil, constLabels)
	}
	return c
}

var bufferDefs = [...]struct {
	name, help string
	typ        prometheus.ValueType
	read       func(s *sock.BufferStats) uint64
}{
	{"buffer_gets_total", "Message and packet buffers taken from the pool or from an endpoint's cache in front of it.", prometheus.CounterValue,
		func(s *sock.BufferStats) uint64 { return s.Gets }},
	{"buffer_allocations_total", "Buffers the pool had to allocate because its free list was empty.", prometheus.CounterValue,
		func(s *sock.BufferStats) uint64 { return s.Allocs }},
	{"buffer_allocated_bytes_total", "Capacity of the buffers the pool allocated.", prometheus.CounterValue,
		func(s *sock.BufferStats) uint64 { return s.AllocBytes }},
	{"buffer_discards_total", "Returned buffers left to the garbage collector because their free list was full.", prometheus.CounterValue,
		func(s *sock.BufferStats) uint64 { return s.Discards }},
	{"buffer_trimmed_total", "Free buffers the pool let go of after they went unused for a while.", prometheus.CounterValue,
		func(s *sock.BufferStats) uint64 { return s.Trimmed }},
	{"buffer_pool_buffers", "Buffers in the pool's free lists (not those in the endpoints' caches).", prometheus.GaugeValue,
		func(s *sock.BufferStats) uint64 { return s.Free }},
	{"buffer_pool_bytes", "Capacity of the buffers in the pool's free lists.", prometheus.GaugeValue,
		func(s *sock.BufferStats) uint64 { return s.FreeBytes }},
	{"buffer_cached_bytes", "Capacity of the buffers in the endpoints' caches in front of the pool.", prometheus.GaugeValue,
		func(s *sock.BufferStats) uint64 { return s.CachedBytes }},
}

// Describe sends the descriptions of the pool's metrics.
func (c *BufferCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect sends the pool's metrics.
func (c *BufferCollector) Collect(ch chan<- prometheus.Metric) {
	s := sock.ReadBufferStats()
	for i, d := range bufferDefs {
		ch <- prometheus.MustNewConstMetric(c.descs[i], d.typ, float64(d.read(&s)))
	}
}
