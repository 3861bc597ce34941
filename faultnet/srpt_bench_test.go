//go:build linux

package faultnet_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/homa-go/homa/faultnet"
	"github.com/homa-go/homa/sock"
)

// The link of BenchmarkSRPT: a tc tbf on the egress of veth0 in BOTH
// namespaces, so each direction is a 1 Gbit/s link with a FIFO in front.
//
//   - rate 1gbit. tbf counts whole frames (IP packet plus the 14-byte
//     Ethernet header), so a 1500-byte Homa packet costs 1514 bytes of
//     it; the pacer's 980 Mbit/s counts IP bytes, which is 989 Mbit/s of
//     frames: just under the link, as the pacer must be.
//   - burst 15140 bytes: ten full frames, 121 µs at the rate. The veth
//     itself is infinitely fast, so tokens are all that makes it a
//     1 Gbit/s wire; ten frames is small enough that a burst after an
//     idle spell is short, and large enough that a tbf watchdog timer
//     that fires late on a busy 2-CPU machine costs no rate. TCP hands
//     down 64 KB GSO packets; tbf cuts those larger than burst into
//     frames and sends them one by one, as a NIC would.
//   - limit 625000 bytes: 5 ms at the rate, a deep switch or NIC queue.
//     It is deeper than anything Homa lets be in flight (the receiver
//     grants at most 400 KB at once, plus 40 KB unscheduled per new
//     message), so Homa loses no packets to it, with the pacer or
//     without, and the difference between the two is queueing alone.
//     TCP keeps as much queued as its congestion control and TCP small
//     queues allow, and now and then overflows it. The table's tbf drops
//     column shows both.
//
// A tbf is a single FIFO, like a NIC queue or a switch port without
// priority queues: the DSCP values Homa sets from its priorities are
// carried but ignored. Nothing below the sender reorders anything, so a
// 100-byte request queued behind 1 MB of background data waits for all
// of it. What keeps that from happening with the pacer on is the pacer
// itself: it hands no more than about 20 µs of data to the kernel at a
// time, so the FIFO stays short, and it picks the message with the
// fewest bytes left (SRPT) for each packet, so the short message is next.
const (
	srptRate  = 1_000_000_000 // bit/s
	srptBurst = 10 * 1514     // bytes
	srptLimit = 625_000       // bytes: 5 ms at srptRate
)

// srptTCPPort is the TCP port of the echo server, next to serverPort.
const srptTCPPort = 5000

var (
	srptRPCs    = flag.Int("srpt.rpcs", 2000, "BenchmarkSRPT: measured 100-byte RPCs per configuration")
	srptStreams = flag.Int("srpt.streams", 2, "BenchmarkSRPT: background goroutines sending 1 MB RPCs back to back")
)

// srptConfig is one configuration of BenchmarkSRPT.
type srptConfig struct {
	name     string
	mode     string // "homa" or "tcp"
	linkMbps int    // homa.Config.LinkMbps on both sockets
	cc       string // TCP congestion control of every connection, both ends; "" keeps the default
}

var srptConfigs = []srptConfig{
	{name: "homa-pacer", mode: "homa", linkMbps: 980},
	{name: "homa-nopacer", mode: "homa"},
	{name: "tcp", mode: "tcp"}, // the default (new namespaces inherit the host's)
	{name: "tcp-cubic", mode: "tcp", cc: "cubic"},
}

// srptRow is one line of BenchmarkSRPT's table.
type srptRow struct {
	cfg     srptConfig
	cc      string // congestion control in use
	res     *srptResult
	srv     srptServerReport
	ab, ba  tbfStats // the tbf of A (A->B, responses) and of B (B->A, requests)
	elapsed time.Duration
}

// BenchmarkSRPT measures the latency of 100-byte RPCs while 1 MB
// messages keep a 1 Gbit/s link busy both ways: Homa with the pacer and
// its SRPT queue (LinkMbps 980), Homa without (LinkMbps 0), and Go TCP
// (short RPCs on their own connection, the background on one connection
// per stream), under the default congestion control and under cubic
// (set on each socket with TCP_CONGESTION).
//
//	go test -run '^$' -bench SRPT -benchtime 1x ./faultnet
//
// Each configuration gets fresh namespaces with a tbf on each side (see
// srptRate), an echo server in A (Homa raw IP and Go TCP in one process)
// and a client in B. The client measures 200 idle 100-byte RPCs, starts
// -srpt.streams goroutines sending 1,000,000-byte RPCs back to back,
// waits 200 ms, then times 100-byte RPCs one after another: at least
// -srpt.rpcs of them and for at least 2 s (so that the background's
// goodput is measured over many 1 MB messages), 20 s at most. Each
// sub-benchmark runs the experiment once, whatever b.N; it reports p50-us, p99-us, p99.9-us, bg-MB/s (the background's
// goodput each way) and errors (100-byte RPCs that failed), and a table
// follows; with -v, the Homa engines' RESEND, retransmission, drop and
// pacer counters and the tbf counters are logged too.
//
// Both child processes share the machine's CPUs with the kernel's
// softirq work for the link. On a small machine the Homa engine, which
// makes system calls per packet or small batch where TCP hands 64 KB to
// the kernel at a time, can run out of CPU before the link runs out of
// bandwidth: then bg MB/s is lower than TCP's and the tails of the
// 100-byte RPCs include scheduling delay.
func BenchmarkSRPT(b *testing.B) {
	var rows []*srptRow
	for _, cfg := range srptConfigs {
		row := &srptRow{cfg: cfg}
		rows = append(rows, row)
		b.Run("config="+cfg.name, func(b *testing.B) { measureSRPT(b, row) })
	}
	printSRPTTable(rows)
}

func measureSRPT(b *testing.B, row *srptRow) {
	began := time.Now()
	cfg := row.cfg
	p := faultnet.Setup(b)
	for _, ns := range []*faultnet.NS{p.A, p.B} {
		if err := setSRPTLink(ns); err != nil {
			b.Fatal(err)
		}
	}

	tcpAddr := netip.AddrPortFrom(faultnet.AddrA, srptTCPPort)
	srv := faultnet.StartChild(b, p.A, "srpt-server", "-homa", serverAddr.String(), "-tcp", tcpAddr.String(),
		"-link-mbps", strconv.Itoa(cfg.linkMbps), "-cc", cfg.cc)
	expect(b, srv, "ready", lineWait)

	params := srptParams{
		Mode:       cfg.mode,
		LinkMbps:   cfg.linkMbps,
		Local:      faultnet.AddrB,
		HomaServer: serverAddr,
		TCPServer:  tcpAddr,
		CC:         cfg.cc,
		Idle:       200,
		IdleLimit:  5 * time.Second,
		Streams:    *srptStreams,
		BgSize:     1_000_000,
		Warmup:     200 * time.Millisecond,
		RPCs:       *srptRPCs,
		MinWindow:  2 * time.Second,
		Size:       100,
		Limit:      20 * time.Second,
		RPCTimeout: 2 * time.Second,
		BgTimeout:  10 * time.Second,
	}
	arg, _ := json.Marshal(params)
	b.ResetTimer()
	cli := faultnet.StartChild(b, p.B, "srpt-client", string(arg))
	// Every phase of the client is bounded: the idle RPCs (and the last
	// of them), the warm-up, the measured phase (and its last RPC), and
	// the background's last RPC.
	wait := params.IdleLimit + params.RPCTimeout + params.Warmup + params.Limit + params.RPCTimeout + params.BgTimeout + lineWait
	var res srptResult
	decode(b, expect(b, cli, "result", wait), &res)
	b.StopTimer()
	row.res = &res
	row.cc = res.CC
	var err error
	if err := srv.Send("report"); err != nil {
		b.Fatal(err)
	}
	decode(b, expect(b, srv, "report", lineWait), &row.srv)
	if row.ab, err = readTBF(p.A); err != nil {
		b.Error(err)
	}
	if row.ba, err = readTBF(p.B); err != nil {
		b.Error(err)
	}
	row.elapsed = time.Since(began)

	if res.Errors > 0 || res.IdleErrors > 0 {
		b.Logf("%d measured and %d idle RPCs failed; first: %q", res.Errors, res.IdleErrors, res.FirstErrs)
	}
	if res.BgErrors > 0 {
		b.Logf("%d background RPCs failed; first: %s", res.BgErrors, res.BgFirstErr)
	}
	if res.LimitHit {
		b.Logf("measured phase cut at %v after %d RPCs", params.Limit, res.Measured+res.Errors)
	}
	if h := res.Homa; h != nil {
		s := row.srv.Homa
		for _, e := range []struct {
			who string
			st  *sock.Stats
		}{{"client", h}, {"server", &s}} {
			b.Logf("homa %s: %d retransmits, %d RESENDs sent, %d peer timeouts, %d duplicate DATA, drops %v; pacer: %d packets, %d throttled, %d FIFO picks",
				e.who, e.st.Retransmits, e.st.ResendsSent, e.st.PeerTimeouts, e.st.DuplicatePackets, e.st.Drops,
				e.st.Pacer.Sends, e.st.Pacer.Throttled, e.st.Pacer.FIFOPicks)
		}
	}
	b.Logf("tbf B->A: %d packets, %.1f MB, %d dropped, %d overlimits; A->B: %d packets, %.1f MB, %d dropped, %d overlimits",
		row.ba.Packets, float64(row.ba.Bytes)/1e6, row.ba.Drops, row.ba.Overlimits,
		row.ab.Packets, float64(row.ab.Bytes)/1e6, row.ab.Drops, row.ab.Overlimits)

	b.ReportMetric(res.P50, "p50-us")
	b.ReportMetric(res.P99, "p99-us")
	b.ReportMetric(res.P999, "p99.9-us")
	b.ReportMetric(res.BgMBps, "bg-MB/s")
	b.ReportMetric(float64(res.Errors), "errors")
}

// setSRPTLink puts the tbf of BenchmarkSRPT on ns's veth0.
func setSRPTLink(ns *faultnet.NS) error {
	_, err := ns.Exec("tc", "qdisc", "replace", "dev", faultnet.Dev, "root", "tbf",
		"rate", strconv.Itoa(srptRate)+"bit",
		"burst", strconv.Itoa(srptBurst),
		"limit", strconv.Itoa(srptLimit))
	return err
}

// tbfStats are the counters of a tbf.
type tbfStats struct {
	Kind                        string
	Bytes, Packets              uint64
	Drops, Overlimits, Requeues uint64
	Backlog, Qlen               uint64
}

// readTBF reads the counters of the tbf on ns's veth0.
func readTBF(ns *faultnet.NS) (tbfStats, error) {
	out, err := ns.Exec("tc", "-s", "-j", "qdisc", "show", "dev", faultnet.Dev)
	if err != nil {
		return tbfStats{}, err
	}
	var qs []tbfStats
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		return tbfStats{}, fmt.Errorf("tc qdisc stats in %s: %w in %q", ns.Name, err, out)
	}
	for _, q := range qs {
		if q.Kind == "tbf" {
			return q, nil
		}
	}
	return tbfStats{}, fmt.Errorf("no tbf on %s in %s: %q", faultnet.Dev, ns.Name, out)
}

func printSRPTTable(rows []*srptRow) {
	fmt.Printf("100-byte RPCs behind %d streams of 1 MB RPCs; each way a tbf FIFO of %d Mbit/s, burst %d B, limit %d B\n",
		*srptStreams, srptRate/1_000_000, srptBurst, srptLimit)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "config\tpacer Mbps\tTCP cc\tidle p50 µs\tRPCs\tp50 µs\tp99 µs\tp99.9 µs\tmax µs\tbg MB/s\terrors\tbg errors\ttbf drops\ttime s\t")
	for _, r := range rows {
		if r.res == nil {
			continue // filtered out by -bench, or failed
		}
		res := r.res
		pacer, cc := "-", "-"
		if r.cfg.mode == "homa" {
			pacer = "off"
			if r.cfg.linkMbps > 0 {
				pacer = strconv.Itoa(r.cfg.linkMbps)
			}
		} else {
			cc = r.cc
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.0f\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f\t%d\t%d\t%d\t%.1f\t\n",
			r.cfg.name, pacer, cc, res.IdleP50, res.Measured, res.P50, res.P99, res.P999, res.Max,
			res.BgMBps, res.Errors, res.BgErrors, r.ab.Drops+r.ba.Drops, r.elapsed.Seconds())
	}
	w.Flush()
}
