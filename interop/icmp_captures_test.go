package interop

import (
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/homa-go/homa/contract"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/sim"
	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/internal/capture/pcapfile"
)

// capturedIP reads every IP packet of a capture.
func capturedIP(t *testing.T, name string) []pcapfile.IPPacket {
	t.Helper()
	r, err := pcapfile.Open(filepath.Join(captureDir, name+".pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var pkts []pcapfile.IPPacket
	for rec, err := range r.Records() {
		if err != nil {
			t.Fatal(err)
		}
		p, err := pcapfile.ParseIP(rec.Frame, r.LinkType())
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, p)
	}
	return pkts
}

// ICMP facts (RFC 792).
const (
	ipProtoICMP        = 1
	ipProtoHoma        = 146
	icmpDestUnreach    = 3
	icmpProtoUnreach   = 2
	icmpHeaderLen      = 8
	captureEchoRequest = 6100 // the request of capture 06b
)

// TestICMPCaptureProtocolUnreachable replays capture 06b through the
// engine: the module, serving a 100-byte request, sends NEED_ACK every
// tick until the client's host, which has no Homa (no raw socket open),
// answers one with ICMP protocol unreachable; the module then forgets
// the RPC and the NEED_ACKs stop. Here the engine serves the capture's
// request on the simulator, and the capture's ICMP message (its type,
// code and the NEED_ACK it quotes, from the Homa header on, as the
// engine's socket reads it from its error queue) reaches it after its
// first NEED_ACKs: the server RPC must be freed and no NEED_ACK follow.
//
// Capture 08 (a request to a port without a socket) holds no ICMP: the
// module did not answer the lone DATA. There is nothing of it to replay
// on this path; the module's ICMP for such a port (sent when the
// client's RESEND comes) is checked live by TestLiveNoListener, and the
// kernel backend's handling of it by khoma's recorded fixture
// "nolistener".
func TestICMPCaptureProtocolUnreachable(t *testing.T) {
	var data, icmp []byte
	for _, p := range capturedIP(t, "06b_no_raw_socket_icmp_unreach_aborts_rpc") {
		switch {
		case p.Proto == ipProtoHoma && p.Src == peerAddr && data == nil:
			data = p.Payload
		case p.Proto == ipProtoICMP:
			if p.Src != peerAddr || p.Dst != moduleAddr {
				t.Fatalf("ICMP from %v to %v, want from the peer to the module", p.Src, p.Dst)
			}
			icmp = p.Payload
		}
	}
	if data == nil || len(icmp) < icmpHeaderLen+20 {
		t.Fatalf("capture 06b: request %d bytes, ICMP %d bytes", len(data), len(icmp))
	}
	if icmp[0] != icmpDestUnreach || icmp[1] != icmpProtoUnreach {
		t.Fatalf("capture 06b: ICMP type %d code %d, want protocol unreachable (3, 2)", icmp[0], icmp[1])
	}
	inner := icmp[icmpHeaderLen:]
	ihl := int(inner[0]&0x0f) * 4
	innerDst := netip.AddrFrom4([4]byte(inner[16:20]))
	quoted := inner[ihl:]
	if inner[9] != ipProtoHoma || innerDst != peerAddr || len(quoted) < wire.CommonLen {
		t.Fatalf("capture 06b: the ICMP quotes protocol %d to %v, %d bytes", inner[9], innerDst, len(quoted))
	}
	var q wire.Packet
	if err := q.Parse(quoted); err != nil || q.Type != wire.TypeNeedAck {
		t.Fatalf("capture 06b: the quoted packet is %v (%v), want a NEED_ACK", q.Type, err)
	}

	var needAcks, afterICMP int
	icmpSent := false
	n := sim.New(sim.Config{Seed: 6, Drop: func(src, dst netip.AddrPort, pkt []byte) bool {
		var p wire.Packet
		if p.Parse(pkt) == nil && p.Type == wire.TypeNeedAck {
			needAcks++
			if icmpSent {
				afterICMP++
			}
		}
		return false
	}})
	srv := n.Listen(netip.AddrPortFrom(moduleAddr, moduleServerPort), core.Config{})
	srv.OnMessage = func(e *sim.Endpoint, m *contract.Message) {
		if err := e.Reply(m, m.Data); err != nil {
			t.Errorf("reply: %v", err)
		}
	}
	n.Inject(peerAddr, moduleAddr, data)
	if !n.RunUntil(func() bool { return needAcks >= 2 }, time.Second) {
		t.Fatalf("the engine sent %d NEED_ACKs in 1 s of simulated time, want 2", needAcks)
	}
	if got := srv.Core.Stats().ServerRPCs; got != 1 {
		t.Fatalf("%d server RPCs before the ICMP, want 1", got)
	}
	srv.Unreachable(core.ProtocolUnreachable, quoted, innerDst)
	icmpSent = true
	n.Run(n.Now() + 200*time.Millisecond)
	st := srv.Core.Stats()
	if st.ServerRPCs != 0 || afterICMP != 0 {
		t.Errorf("after the ICMP: %d server RPCs, %d NEED_ACKs; want none (the module forgets the RPC)", st.ServerRPCs, afterICMP)
	}
	if binary.BigEndian.Uint64(quoted[20:]) != captureEchoRequest|1 {
		t.Errorf("the quoted NEED_ACK is for RPC %d, want %d", binary.BigEndian.Uint64(quoted[20:]), captureEchoRequest|1)
	}
}
