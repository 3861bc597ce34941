// Package dcsim simulates a datacenter fabric running the real Homa
// protocol core (package homa/core), one core per host, on a virtual
// clock, a TCP-like baseline (DCTCP-style windows with ECN) in the same
// fabric, and an ideal SRPT oracle (a centralized greedy scheduler with
// global knowledge, each host sending and receiving one message at a
// time at line rate), so that the Homa paper's experiments can be rerun
// on the code that ships and read against TCP and against the ideal.
//
// The fabric is a two-level leaf-spine network: hosts with NICs at a
// line rate, top-of-rack switches and spines, every link's sending end a
// port with eight strict-priority queues (the packet's priority picks
// the queue) and a finite buffer whose overflows are dropped and
// counted. Packets are sprayed over the spines, or hashed (ECMP).
// Switches are cut-through or store-and-forward; propagation, switching
// and host software delays are parameters. See docs/simulation.md for the
// model and its simplifications.
//
// Run runs one protocol over a workload (W1 to W5: Poisson arrivals at a
// fraction of the host link rate, uniform random destinations, optional
// incast) and returns its Result: slowdowns by message size, the
// shortest 20% apart, achieved against offered load, queue occupancy by
// layer, drops, grants and RESENDs. A run is deterministic for a seed.
// WriteTable prints results, WritePlot draws slowdown by message size
// per run; the command "homa sim" (cmd/homa) wraps all three.
//
// Each host runs one core with the engine's default configuration (the
// pacer set to 97% of the host link): the simulator only moves packets
// and keeps time, so the grant, pacing, priority and resend policies it
// shows are the shipped ones. Workloads come from package
// internal/tools/workload (W1 to W5), with the sizes above the core's
// 1,000,000-byte maximum message that package truncates restored from
// the published distributions (tails/). Homa carries such a message as
// several core RPCs from its sender to its receiver, at most two
// outstanding, and it has arrived when its last part has; the baseline
// carries it as one flow and the oracle as one message. Every RPC's
// request and response are both workload messages, with independent
// sizes.
package dcsim
