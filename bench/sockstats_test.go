package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/homa-go/homa/bench"
)

// TestSocketStats: with Config.Stats a Homa protocol's row carries what
// its client sockets counted over the run (every request sent as DATA,
// every response received), and its server's socket (here in this
// process), the report prints both, and a protocol with no Homa socket
// carries none.
func TestSocketStats(t *testing.T) {
	homaUDP, _ := bench.LookupProtocol("homa-udp")
	tcp, _ := bench.LookupProtocol("tcp")
	cfg := &bench.Config{
		Mode:      bench.Latency,
		Protocols: []bench.Protocol{homaUDP, tcp},
		InProcess: true,
		Size:      100,
		Count:     200,
		Warmup:    10,
		Stats:     true,
	}
	rep, err := bench.Run(context.Background(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		switch r.Protocol {
		case "tcp":
			if r.ClientStats != nil || r.ServerStats != nil {
				t.Errorf("tcp row has socket stats %+v, %+v", r.ClientStats, r.ServerStats)
			}
		case "homa-udp":
			s := r.ClientStats
			if s == nil {
				t.Fatal("homa-udp row has no socket stats")
			}
			if s.Sockets != 1 || s.Sent["DATA"] < 210 || s.Received["DATA"] < 210 || r.StatsRPCs != 210 {
				t.Errorf("homa-udp: %d sockets, %d DATA sent, %d received, %d RPCs; want 1, at least 210 each, 210",
					s.Sockets, s.Sent["DATA"], s.Received["DATA"], r.StatsRPCs)
			}
			if v := r.ServerStats; v == nil || v.Received["DATA"] < 210 || v.Sent["DATA"] < 210 {
				t.Errorf("homa-udp server: stats %+v, want at least 210 DATA received and sent", v)
			}
		}
	}
	var out bytes.Buffer
	if err := rep.Write(&out, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "homa-udp: 1 client sockets; sent ") || !strings.Contains(out.String(), "receive path: parks ") ||
		!strings.Contains(out.String(), "homa-udp server: sent ") {
		t.Errorf("report without the socket stats:\n%s", out.String())
	}
}
