// Package bench measures Homa against other transports and RPC layers:
// it is the harness behind "homa bench", and the Ping behind "homa ping"
// and "homa demo".
//
// # What it measures
//
// A run (Run, configured by a Config) measures each of its Protocols in
// turn, one row of the Report each. The protocols are Homa over raw IP
// (protocol 146) and over UDP, Go TCP with a pool of connections per
// client, gRPC-go, the RPC layers over Homa (erpc, a gRPC stub) and the
// stub over gRPC-go/TCP, and two floors measured within this process:
// Go UDP, one datagram each way, and raw IP sockets with no protocol
// logic (ProtocolNames lists them; ParseProtocols takes a list, or a
// set such as "layers").
//
// Each protocol runs a warmup, then, in throughput and workload modes, a
// calibration (RPCs one at a time that slowdowns are relative to), then
// the measured phase of the mode:
//
//   - Latency: one RPC at a time, every reply checked byte for byte;
//     RTT percentiles, and RPCs/s over the time spent in calls.
//   - Throughput: Clients x Outstanding RPCs in flight, each lane
//     starting its next RPC when its last completes (closed loop), until
//     Count RPCs or Duration.
//   - Workload: open loop, RPCs sent at the times of a Poisson process
//     whose rate puts LoadMbps of request payload on the wire, sizes
//     drawn from a workload distribution (W1-W5), whatever the replies
//     do; arrivals beyond MaxOutstanding in flight are dropped and
//     counted.
//
// A row has RTT percentiles, RPCs/s, Gbit/s of request payload, CPU time
// per RPC, ratios to the tcp row, and percentiles and slowdowns by
// request size: RTT over the protocol's own unloaded RTT of the size, and
// over the fastest unloaded RTT of the size among the run's protocols,
// one denominator for every row (workload.Fastest); the Report also has the
// ratios the RPC layers aim at. Report.Write prints it as tables or JSON,
// Report.Plot draws slowdown against size.
//
// # How
//
// Every request is a prefix of one byte pattern; sizes come from streams
// of one seed, so every protocol sees the same sizes. Each reply's length
// and leading bytes are checked (all of it, one RPC at a time); a wrong
// reply ends the run.
//
// By default each protocol's server runs in a child process, so that
// the figures are those of two processes: the program that runs bench
// is started again as "serve --parent --proto P --addr HOST:0" with the
// run's reply size and engine settings (cmd/homa is that program; a
// Config's Executable names another). The child says where it serves on
// its standard output, answers "cpu" queries on its standard input
// with its CPU time (AnswerParent is that side), and stops when its
// input closes, which also happens when bench dies; on Linux it is
// killed with the thread that started it. CPU per RPC counts both
// processes' user and system time. InProcess runs the servers in this
// process; a Target measures a remote server (Serve is what runs there).
package bench
