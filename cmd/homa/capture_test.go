package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/bench"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/internal/capture/hcap"
	"github.com/homa-go/homa/internal/capture/linuxcap"
	"github.com/homa-go/homa/internal/capture/pcapfile"
	"github.com/homa-go/homa/sock"
)

// captureDir holds the captures of the Linux Homa module
// (interop/testdata/linux-captures).
var captureDir, _ = linuxcap.Dir()

// runCaptureArgs runs "homa capture" with args.
func runCaptureArgs(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = runCapture(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// captureLine matches a line of "homa capture": time, addresses, type.
var captureLine = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{6} (\S+) -> (\S+) (\S+) `)

// shownPacket is one line of "homa capture" output.
type shownPacket struct {
	src, dst string
	typ      string // the packet type, or "undecodable"
	line     string
}

// parseCaptureOutput splits the output of "homa capture" into packets.
func parseCaptureOutput(t *testing.T, out string) []shownPacket {
	t.Helper()
	var pkts []shownPacket
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		m := captureLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line not in the capture format: %q", line)
		}
		pkts = append(pkts, shownPacket{src: m[1], dst: m[2], typ: m[3], line: line})
	}
	return pkts
}

// logLine matches a packet line of a capture log: direction and type.
var logLine = regexp.MustCompile(`^\s*[\d.]+ms (TX|RX from \S+ tos=\S+ ip_len=\d+) +(\S+) `)

// logTypes returns the direction ("TX" or "RX") and type of every packet
// line of a capture's log, in order.
func logTypes(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(captureDir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var types []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := logLine.FindStringSubmatch(s.Text()); m != nil {
			types = append(types, m[1][:2]+" "+m[2])
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return types
}

// completeLogs are the captures whose logs show every Homa packet of the
// pcap (the others leave some traffic out).
var completeLogs = []string{
	"01_host_req100_guest_echo",
	"04_host_req5000_withhold_pkt1_resend",
	"05_host_req100_cutoff_version0_cutoffs",
	"07_host_resend_unknown_rpc_rpc_unknown",
	"08_host_req100_to_unbound_port",
	"09_guest_client_req100x3_to_host_server",
	"11_guest_client_no_response_resend_timeout",
	"12_guest_client_req100_host_slow_server_busy",
	"13_guest_client_req5000_host_withholds_resp_pkt1_resend",
}

// TestCaptureFile decodes captures of the Linux module: the packets shown
// are those of the capture's log, in the same order, with the same types
// and directions.
func TestCaptureFile(t *testing.T) {
	if captureDir == "" {
		t.Fatal("no captures of the Linux module (interop/testdata/linux-captures)")
	}
	const rawPeer = "10.146.12.1" // "TX" in the logs
	total := 0
	for _, name := range completeLogs {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runCaptureArgs(context.Background(), "--file", filepath.Join(captureDir, name+".pcap"))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got []string
			for _, p := range parseCaptureOutput(t, out) {
				dir := "RX"
				if p.src == rawPeer {
					dir = "TX"
				}
				got = append(got, dir+" "+p.typ)
			}
			want := logTypes(t, name)
			if !slices.Equal(got, want) {
				t.Errorf("packets shown:\n%v\nthe log:\n%v", got, want)
			}
			if summary := fmt.Sprintf("homa capture: %d Homa packets (0 undecodable, 0 truncated by the snapshot length)\n", len(want)); errOut != summary {
				t.Errorf("stderr %q, want %q", errOut, summary)
			}
			total += len(got)
		})
	}
	t.Logf("%d packets in %d captures", total, len(completeLogs))
}

// TestCaptureFileFields checks whole lines: the decoded packet after the
// addresses is the log's description of it.
func TestCaptureFileFields(t *testing.T) {
	path := filepath.Join(captureDir, "05_host_req100_cutoff_version0_cutoffs.pcap")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the captures are in the repository (interop/testdata/linux-captures): %v", err)
	}
	code, out, errOut := runCaptureArgs(context.Background(), "--file", path, "--count", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := []string{
		"10.146.12.1 -> 10.146.12.2 DATA 40000->500 id=5000 off=0 seq=0 seg_off=0 paylen=100 msg_len=100 incoming=100 ack=(0,0) cutoff_ver=0 rexmit=0 [homa_len=156 doff=0xe0 flags=6 urg=0xb97d csum=0x0000]",
		"10.146.12.2 -> 10.146.12.1 CUTOFFS 500->40000 id=5001 cutoffs=[0, 0, 0, 0, 1000000, 15000, 2800, 200] version=1 [homa_len=62 doff=0x50 flags=6 urg=0xb97d csum=0x0000]",
	}
	pkts := parseCaptureOutput(t, out)
	if len(pkts) != len(want) {
		t.Fatalf("--count 2 showed %d packets:\n%s", len(pkts), out)
	}
	for i, p := range pkts {
		if _, rest, _ := strings.Cut(p.line, " "); rest != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, rest, want[i])
		}
	}
}

// TestCapturePortFilter: --port keeps the packets from or to that port.
func TestCapturePortFilter(t *testing.T) {
	path := filepath.Join(captureDir, "09_guest_client_req100x3_to_host_server.pcap")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the captures are in the repository (interop/testdata/linux-captures): %v", err)
	}
	for _, tc := range []struct {
		ports string
		want  int
	}{{"600", 6}, {"32771", 6}, {"1,600", 6}, {"500", 0}} {
		code, out, errOut := runCaptureArgs(context.Background(), "--file", path, "--port", tc.ports)
		if code != 0 {
			t.Fatalf("--port %s: exit %d: %s", tc.ports, code, errOut)
		}
		if n := len(parseCaptureOutput(t, out)); n != tc.want {
			t.Errorf("--port %s: %d packets, want %d", tc.ports, n, tc.want)
		}
	}
}

// TestCaptureUsage: bad flag combinations are usage errors (exit 2).
func TestCaptureUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--file", "a.pcap", "--iface", "lo"},
		{"--file", "a.pcap", "--udp"},
		{"--file", "a.pcap", "--port", "70000"},
		{"--file", "a.pcap", "--port", "0"},
		{"--file", "a.pcap", "--count", "-1"},
		{"--file", "a.pcap", "extra"},
	} {
		if code, _, errOut := runCaptureArgs(context.Background(), args...); !isUsageError("capture", code, errOut) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and the usage", args, code, errOut)
		}
	}
	if code, _, _ := runCaptureArgs(context.Background(), "-h"); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
	code, _, errOut := runCaptureArgs(context.Background(), "--file", filepath.Join(t.TempDir(), "missing.pcap"))
	if code != 1 || !strings.HasPrefix(errOut, "homa capture: ") {
		t.Errorf("missing file: exit %d, stderr %q; want 1 and one line", code, errOut)
	}
}

// frame builds an Ethernet frame around an IP packet of protocol proto.
func frame(src, dst string, proto uint8, payload []byte) []byte {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	eth := make([]byte, 12, 14+40+len(payload))
	if s.Is4() {
		eth = binary.BigEndian.AppendUint16(eth, 0x0800)
		h := make([]byte, 20)
		h[0], h[1] = 0x45, 0xe0
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
		h[8], h[9] = 64, proto
		copy(h[12:], s.AsSlice())
		copy(h[16:], d.AsSlice())
		return append(append(eth, h...), payload...)
	}
	eth = binary.BigEndian.AppendUint16(eth, 0x86dd)
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6], h[7] = proto, 64
	copy(h[8:], s.AsSlice())
	copy(h[24:], d.AsSlice())
	return append(append(eth, h...), payload...)
}

// udp builds a UDP datagram (checksum zero) around payload.
func udp(sport, dport uint16, payload []byte) []byte {
	h := binary.BigEndian.AppendUint16(nil, sport)
	h = binary.BigEndian.AppendUint16(h, dport)
	h = binary.BigEndian.AppendUint16(h, uint16(8+len(payload)))
	h = binary.BigEndian.AppendUint16(h, 0)
	return append(h, payload...)
}

// writePcap writes frames to a new pcap file and returns its path.
func writePcap(t *testing.T, frames ...[]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pcapfile.NewWriter(f, pcapfile.LinkEthernet)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 11, 22, 6, 43, 10, 0, time.UTC)
	for i, fr := range frames {
		if err := w.WritePacket(at.Add(time.Duration(i)*time.Millisecond), fr); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestCaptureIPv6UDPAndBad: IPv6 and UDP encapsulation are understood,
// other traffic is skipped, and a Homa packet that does not decode is
// shown with the error.
func TestCaptureIPv6UDPAndBad(t *testing.T) {
	grant := (&wire.Grant{Common: wire.Common{SrcPort: 4000, DstPort: 32768, SenderID: 3}, Offset: 50000, Priority: 2}).Append(nil)
	need := (&wire.Bare{Common: wire.Common{Type: wire.TypeNeedAck, SrcPort: 4000, DstPort: 32768, SenderID: 5}}).Append(nil)
	path := writePcap(t,
		frame("fd00::2", "fd00::1", hcap.ProtoHoma, grant),
		frame("10.0.0.1", "10.0.0.2", hcap.ProtoHoma, grant[:20]),               // truncated
		frame("10.0.0.1", "10.0.0.2", 6, make([]byte, 40)),                      // TCP
		frame("10.0.0.1", "10.0.0.2", 17, udp(4000, 32768, need)),               // Homa in UDP
		frame("10.0.0.1", "10.0.0.2", 17, udp(53, 33000, []byte("not homa!!"))), // other UDP
	)

	code, out, errOut := runCaptureArgs(context.Background(), "--file", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	pkts := parseCaptureOutput(t, out)
	if len(pkts) != 2 || pkts[0].src != "fd00::2" || pkts[0].typ != "GRANT" ||
		!strings.HasSuffix(pkts[0].line, "GRANT 4000->32768 id=3 offset=50000 priority=2 [homa_len=33 doff=0x50 flags=6 urg=0xb97d csum=0x0000]") ||
		!strings.HasSuffix(pkts[1].line, "10.0.0.1 -> 10.0.0.2 undecodable Homa packet (20 bytes): "+wire.ErrShort.Error()) {
		t.Errorf("IP protocol 146:\n%s", out)
	}
	if want := "homa capture: 2 Homa packets (1 undecodable, 0 truncated by the snapshot length)\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}

	code, out, errOut = runCaptureArgs(context.Background(), "--file", path, "--udp", "--port", "4000")
	if code != 0 {
		t.Fatalf("--udp: exit %d: %s", code, errOut)
	}
	pkts = parseCaptureOutput(t, out)
	if len(pkts) != 1 || pkts[0].typ != "NEED_ACK" || !strings.Contains(pkts[0].line, "NEED_ACK 4000->32768 id=5 ") {
		t.Errorf("--udp --port 4000:\n%s", out)
	}
}

// TestCaptureWrite: --write saves the frames shown, which read back the
// same.
func TestCaptureWrite(t *testing.T) {
	path := filepath.Join(captureDir, "12_guest_client_req100_host_slow_server_busy.pcap")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the captures are in the repository (interop/testdata/linux-captures): %v", err)
	}
	saved := filepath.Join(t.TempDir(), "busy.pcap")
	code, out, errOut := runCaptureArgs(context.Background(), "--file", path, "--write", saved, "--count", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, again, errOut := runCaptureArgs(context.Background(), "--file", saved)
	if code != 0 {
		t.Fatalf("reading the saved file: exit %d: %s", code, errOut)
	}
	if len(parseCaptureOutput(t, out)) != 5 || again != out {
		t.Errorf("saved file shows:\n%s\nthe capture showed:\n%s", again, out)
	}
}

// TestCaptureTruncated: frames that the snapshot length cut are not
// hidden. A DATA packet whose payload was cut is shown as DATA, marked
// truncated; one cut inside its header is shown as a truncated packet;
// both are counted as truncated, not undecodable. Frames cut too short to
// tell whether they carry Homa are counted apart. --write keeps the
// original lengths.
func TestCaptureTruncated(t *testing.T) {
	grant := (&wire.Grant{Common: wire.Common{SrcPort: 4000, DstPort: 32768, SenderID: 3}, Offset: 50000, Priority: 2}).Append(nil)
	data := (&wire.Data{
		Common:        wire.Common{SrcPort: 32768, DstPort: 4000, SenderID: 4, Sequence: 1400},
		MessageLength: 3000,
		Incoming:      3000,
		SegOffset:     wire.OffsetNone,
		Payload:       make([]byte, 1400),
	}).Append(nil)
	const homaAt = 14 + 20 // Ethernet and IPv4 headers
	whole := func(f []byte) pcapfile.Record { return pcapfile.Record{Frame: f} }
	cut := func(f []byte, n int) pcapfile.Record { return pcapfile.Record{Frame: f[:n], OrigLen: len(f)} }
	dataFrame := frame("10.0.0.2", "10.0.0.1", hcap.ProtoHoma, data)
	grantFrame := frame("10.0.0.1", "10.0.0.2", hcap.ProtoHoma, grant)
	shortGrant := frame("10.0.0.1", "10.0.0.2", hcap.ProtoHoma, grant[:20])
	tcpFrame := frame("10.0.0.1", "10.0.0.2", 6, make([]byte, 200))
	recs := []pcapfile.Record{
		whole(grantFrame),
		cut(dataFrame, homaAt+wire.DataLen+40), // payload cut: DATA, truncated
		cut(grantFrame, homaAt+12),             // cut in the common header
		cut(grantFrame, homaAt+2),              // cut before the ports
		whole(shortGrant),                      // sent short: undecodable
		cut(grantFrame, 14+10),                 // cut in the IP header
		cut(tcpFrame, 100),                     // TCP, cut: not Homa
	}
	path := filepath.Join(t.TempDir(), "cut.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapfile.NewWriter(f, pcapfile.LinkEthernet)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 11, 22, 6, 43, 10, 0, time.UTC)
	for i, rec := range recs {
		rec.Time = at.Add(time.Duration(i) * time.Millisecond)
		if err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	saved := filepath.Join(t.TempDir(), "saved.pcap")
	code, out, errOut := runCaptureArgs(context.Background(), "--file", path, "--write", saved)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	pkts := parseCaptureOutput(t, out)
	wantLines := []string{
		"10.0.0.1 -> 10.0.0.2 GRANT 4000->32768 id=3 offset=50000 priority=2 [homa_len=33 ",
		"10.0.0.2 -> 10.0.0.1 DATA 32768->4000 id=4 off=1400 ",
		"10.0.0.1 -> 10.0.0.2 truncated Homa packet (12 of 33 bytes captured): " + wire.ErrShort.Error(),
		"10.0.0.1 -> 10.0.0.2 truncated Homa packet (2 of 33 bytes captured): " + wire.ErrShort.Error(),
		"10.0.0.1 -> 10.0.0.2 undecodable Homa packet (20 bytes): " + wire.ErrShort.Error(),
	}
	if len(pkts) != len(wantLines) {
		t.Fatalf("%d packets shown, want %d:\n%s", len(pkts), len(wantLines), out)
	}
	for i, want := range wantLines {
		if _, desc, _ := strings.Cut(pkts[i].line, " "); !strings.HasPrefix(desc, want) {
			t.Errorf("packet %d: %s\nwant it to start with %s", i, desc, want)
		}
	}
	if mark := fmt.Sprintf(" [truncated: %d of %d bytes captured]", wire.DataLen+40, len(data)); !strings.HasSuffix(pkts[1].line, mark) ||
		!strings.Contains(pkts[1].line, " paylen=40 ") {
		t.Errorf("truncated DATA: %s\nwant paylen=40 and the mark%s", pkts[1].line, mark)
	}
	want := "homa capture: 5 Homa packets (1 undecodable, 3 truncated by the snapshot length); 1 frames cut too short to tell whether they carry Homa\n"
	if errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}

	// A port filter cannot tell about the frame cut before the ports.
	code, out, errOut = runCaptureArgs(context.Background(), "--file", path, "--port", "4000")
	if code != 0 {
		t.Fatalf("--port: exit %d: %s", code, errOut)
	}
	want = "homa capture: 4 Homa packets (1 undecodable, 2 truncated by the snapshot length); 2 frames cut too short to tell whether they carry Homa\n"
	if n := len(parseCaptureOutput(t, out)); n != 4 || errOut != want {
		t.Errorf("--port 4000: %d packets, stderr %q, want 4 and %q", n, errOut, want)
	}

	// The saved file holds the packets shown, cut as they were.
	r, err := pcapfile.Open(saved)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got [][2]int
	for rec, err := range r.Records() {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, [2]int{len(rec.Frame), rec.OrigLen})
	}
	var wantSaved [][2]int
	for _, rec := range recs[:5] {
		wantSaved = append(wantSaved, [2]int{len(rec.Frame), max(rec.OrigLen, len(rec.Frame))})
	}
	if !slices.Equal(got, wantSaved) {
		t.Errorf("saved records (captured, original length) %v, want %v", got, wantSaved)
	}
}

// dataLine matches the DATA packets of "homa capture" output: source and
// destination ports, RPC id, and the retransmit flag.
var dataLine = regexp.MustCompile(` DATA (\d+)->(\d+) id=(\d+) .* rexmit=(\d) `)

// homaPorts matches the Homa ports of a line of "homa capture" output.
var homaPorts = regexp.MustCompile(`^\S+ \S+ -> \S+ \S+ (\d+)->(\d+) `)

// TestCaptureLive captures on loopback, filtered by the server's port,
// while a Homa echo server over raw IP answers a few RPCs: the DATA of
// every request and every response is shown, once each though loopback
// shows each packet twice, no packet of another port is shown, and
// --write saves what was shown.
//
// Nothing depends on timing: the capture runs until it has shown the
// DATA of every RPC (whatever else the engines sent meanwhile: NEED_ACK,
// ACK, a RESEND under load), and packets of other tests or processes are
// kept out by the port filter, which the test checks.
func TestCaptureLive(t *testing.T) {
	requireRaw(t)
	l, err := hcap.OpenLive("lo")
	if errors.Is(err, hcap.ErrPermission) || errors.Is(err, hcap.ErrUnsupported) {
		t.Skipf("live capture not possible here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	l.Close()

	port := freePort(t)
	homa, _ := bench.LookupProtocol("homa")
	server, err := bench.Serve(context.Background(), homa, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), bench.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client, err := sock.Open(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	clientPort := client.LocalAddr().Port()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	capCtx, stopCapture := context.WithCancel(ctx)
	defer stopCapture()
	saved := filepath.Join(t.TempDir(), "live.pcap")
	out := newWatchedBuffer()
	errOut := &syncBuffer{written: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- runCapture(capCtx, []string{"--iface", "lo", "--port", fmt.Sprint(port), "--write", saved}, out, errOut)
	}()
	select {
	case <-errOut.written: // "listening on lo": the capture socket is open
	case code := <-done:
		t.Fatalf("capture exited %d before listening: %s", code, errOut.String())
	}

	// The RPCs, one at a time. Each response's DATA carries the server's
	// id for the RPC: the client's id with the low bit set.
	const rpcs = 3
	want := map[string]bool{} // "src->dst id" of each DATA the capture must show
	for i := range rpcs {
		req := []byte(fmt.Sprintf("ping %d", i))
		id, err := client.Send(server.Addr(), req, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.Recv(ctx, id)
		if err != nil || !bytes.Equal(m.Data, req) {
			t.Fatalf("echo %d: %v", i, err)
		}
		m.Release()
		want[fmt.Sprintf("%d->%d %d", clientPort, port, id)] = true
		want[fmt.Sprintf("%d->%d %d", port, clientPort, id^1)] = true
	}
	shown := func(out string) map[string]bool {
		got := map[string]bool{}
		for line := range strings.Lines(out) {
			if m := dataLine.FindStringSubmatch(line); m != nil {
				got[m[1]+"->"+m[2]+" "+m[3]] = true
			}
		}
		return got
	}
	allShown := func(out string) bool {
		got := shown(out)
		for k := range want {
			if !got[k] {
				return false
			}
		}
		return true
	}
	seenAll := out.waitFor(ctx, allShown)
	stopCapture()
	code := <-done
	if !seenAll {
		t.Fatalf("the capture did not show the DATA of every RPC (%v) in time; output:\n%s", slices.Sorted(maps.Keys(want)), out.String())
	}
	if code != 0 {
		t.Fatalf("capture exited %d: %s", code, errOut.String())
	}

	pkts := parseCaptureOutput(t, out.String())
	seen := map[string]bool{}
	for _, p := range pkts {
		m := homaPorts.FindStringSubmatch(p.line)
		if m == nil || m[1] != fmt.Sprint(port) && m[2] != fmt.Sprint(port) {
			t.Errorf("--port %d showed a packet of other ports: %s", port, p.line)
		}
		// A DATA packet is sent once unless it is retransmitted, so one
		// shown twice means loopback's second copy got through. (Other
		// packets, NEED_ACK for one, may be sent again legitimately.)
		if d := dataLine.FindStringSubmatch(p.line); d != nil && d[4] == "0" {
			_, desc, _ := strings.Cut(p.line, " ")
			if seen[desc] {
				t.Errorf("packet shown twice: %s", desc)
			}
			seen[desc] = true
		}
	}
	want2 := fmt.Sprintf("homa capture: %d Homa packets (0 undecodable, 0 truncated by the snapshot length)\n", len(pkts))
	if got := errOut.String(); !strings.HasSuffix(got, want2) {
		t.Errorf("stderr %q, want it to end with %q", got, want2)
	}
	rc, again, rerr := runCaptureArgs(context.Background(), "--file", saved)
	if rc != 0 {
		t.Fatalf("reading the saved capture: exit %d, %s", rc, rerr)
	}
	descs := func(pkts []shownPacket) []string {
		var d []string
		for _, p := range pkts {
			_, desc, _ := strings.Cut(p.line, " ")
			d = append(d, desc)
		}
		return d
	}
	if a, b := descs(parseCaptureOutput(t, again)), descs(pkts); !slices.Equal(a, b) {
		t.Errorf("the saved capture shows\n%s\nthe live capture showed\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}
