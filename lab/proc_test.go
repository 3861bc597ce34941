package lab

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 5, "a\nb\nc"},
		{"", 3, ""},
		{"a\n", 0, ""},
	} {
		if got := lastLines(tc.in, tc.n); got != tc.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestRootDrops(t *testing.T) {
	out := `qdisc tbf 1: root refcnt 3 rate 10Mbit burst 3027b lat 207ms 
 Sent 144584 bytes 104 pkt (dropped 17, overlimits 298 requeues 0) 
 backlog 0b 0p requeues 0
qdisc bfifo 21: parent 10:2 limit 256Kb
 Sent 0 bytes 0 pkt (dropped 3, overlimits 0 requeues 0) 
`
	if n, err := rootDrops(out); n != 17 || err != nil {
		t.Errorf("rootDrops = %d, %v; want 17", n, err)
	}
	for _, bad := range []string{"", "qdisc noqueue 0: root", "qdisc tbf 1: root rate 1Gbit\n Sent 0 bytes 0 pkt (dropped x, overlimits 0)"} {
		if _, err := rootDrops(bad); err == nil {
			t.Errorf("rootDrops(%q) accepted", bad)
		}
	}
}

func TestProcNetDrops(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
 148: 0100930A:0092 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 318865 2 000000007c3a14ec 2094243
 149: 0100930A:0092 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 318866 2 000000007c3a14ed 7
`
	if n, err := procNetDrops(table); n != 2094250 || err != nil {
		t.Errorf("procNetDrops = %d, %v; want 2094250", n, err)
	}
	if n, err := procNetDrops(strings.SplitN(table, "\n", 2)[0]); n != 0 || err != nil {
		t.Errorf("header only: %d, %v", n, err)
	}
	if _, err := procNetDrops("header\n 1: a b c\n"); err == nil {
		t.Error("a table without a drops column was accepted")
	}
}

// TestCommandLines checks that the engine settings of an experiment reach
// both the server's and the clients' command lines.
func TestCommandLines(t *testing.T) {
	l := &Lab{Hosts: []*Host{{Index: 1, Addr: netip.MustParseAddr("10.147.0.1")}}}
	e := &Experiment{Exe: "homa", Proto: "homa", Workload: "w4", Port: 4000, LinkMbps: 1000, UnschedBytes: 9000}
	for _, tc := range []struct {
		polling string
		want    string
	}{
		{"", ""},
		{"never", " --polling never"},
		{"always", " --polling always"},
	} {
		e.Polling = tc.polling
		serve := strings.Join(l.serveArgs(e), " ")
		bench := strings.Join(l.benchArgs(e, 1, time.Second), " ")
		for _, line := range []string{serve, bench} {
			polls := strings.Count(line, "--polling")
			if !strings.Contains(line, " --unsched-bytes 9000") || !strings.HasSuffix(line, tc.want) || polls != strings.Count(tc.want, "--polling") {
				t.Errorf("polling %q: %q", tc.polling, line)
			}
		}
	}
}
