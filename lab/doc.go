// Package lab builds a small datacenter on one Linux machine out of network
// namespaces and runs Homa, TCP and gRPC servers and load generators in it.
//
// A Lab has N hosts, h1..hN, each a namespace with one interface (eth0,
// address 10.147.0.<i>/24), and one switch namespace, sw, holding a Linux
// bridge. Host i is joined to the bridge by a veth pair whose switch end
// is named p<i>. Traffic never leaves these namespaces, and nothing is
// created in the caller's own namespace. The links carry IPv4 only (IPv6
// is turned off in every namespace, so that its neighbour discovery does
// not pass through the queues), with an MTU of 1500 bytes unless
// Link.MTU says otherwise.
//
// The egress of each switch port, that is the host's downlink, emulates a
// switch port with priority queues:
//
//	tbf (root, the link rate; a burst of a few packets)
//	└── htb (8 classes, strict priority, no rate limit of their own)
//	    ├── class for Homa priority 7: bfifo of Buffer bytes
//	    ├── ...
//	    └── class for Homa priority 0: bfifo of Buffer bytes
//
// A u32 filter on the IPv4 TOS byte (or IPv6 traffic class) sends each
// packet to the class of the Homa priority whose DSCP it carries
// (homa/netio.DefaultDSCP: priority p is DSCP 8p); packets that match no
// DSCP of the map (ARP, neighbour discovery) go to the highest class.
// Plain TCP and gRPC carry DSCP 0 and so share the lowest class, a single
// FIFO, as on a switch that only prioritises by DSCP.
//
// The kernel this was built on has tbf and htb but not the prio qdisc,
// hence htb for the priority queues. The rate limiter is tbf rather than
// htb because tbf cuts a GSO/TSO super-packet (up to 64 KB from a veth)
// into MTU-sized segments before they are queued, so the link serializes
// real packets; offloads on the veths are therefore left on. Each class
// has its own byte limit (a switch port with per-queue buffers), so a
// single traffic class such as TCP sees exactly Buffer bytes of buffer.
//
// Programs run inside a host as child processes under "ip netns exec"
// (Lab.Start), which are killed when the Lab closes or when this process
// dies. Close deletes every namespace of the Lab; Cleanup deletes those
// left behind by runs whose process is gone. Run measures one protocol:
// it starts "homa serve" in h1, calibrates with one "homa bench" client
// in h2, then loads h1 from h2..hN at once; Analyze turns the samples
// into slowdown buckets.
//
// Everything but the analysis needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN),
// the ip and tc commands, and Linux; Available says what is missing.
package lab
