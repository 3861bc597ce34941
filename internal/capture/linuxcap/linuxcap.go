// Package linuxcap reads the packet captures of the Linux Homa module that
// serve as test vectors (interop/testdata/linux-captures in this
// repository: NAME.pcap with a decoded NAME.log beside it). The codec's
// tests, the interop suite and the capture command's tests all read them
// through this package.
package linuxcap

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/homa-go/homa/internal/capture/pcapfile"
)

// Peer is the raw-socket peer of the captures: its packets are "TX" in
// the logs; the module's, from 10.146.12.2, are "RX".
var Peer = netip.MustParseAddr("10.146.12.1")

// Packet is one Homa packet of a capture.
type Packet struct {
	TX    bool   // sent by Peer
	TOS   uint8  // IPv4 TOS byte
	IPLen int    // IPv4 total length (the captures have no IP options)
	Homa  []byte // from the Homa common header on
}

// Capture is the Homa packets of one pcap file, in order.
type Capture struct {
	Name    string // file name without extension
	Packets []Packet
}

// LogGaps counts, per capture, the packets the pcap holds that its log
// leaves out, by direction and type ("TX DATA"): the tool that wrote the
// logs did not print part of the traffic of some runs, and stopped before
// the last NEED_ACKs of others.
var LogGaps = map[string]map[string]int{
	"03_host_req200k_unsched_only_grants_resends":    {"TX DATA": 29},
	"06_host_req100_never_ack_need_ack_repeats":      {"RX NEED_ACK": 1},
	"06b_no_raw_socket_icmp_unreach_aborts_rpc":      {"RX NEED_ACK": 1},
	"10_guest_client_req200k_to_host_server_needack": {"TX DATA": 312, "RX DATA": 284, "TX GRANT": 226, "TX NEED_ACK": 2},
	"14_host_req100x3_piggybacked_acks":              {"RX NEED_ACK": 1},
}

// rel is where the captures sit relative to the module's root.
var rel = filepath.Join("interop", "testdata", "linux-captures")

// Dir finds the captures' folder: it walks up from the working directory
// (a test runs in its package's folder) to the module's root, the first
// folder with a go.mod, and returns rel under it. It reports false when
// there is no module root or no captures there.
func Dir() (string, bool) {
	d, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			dir := filepath.Join(d, rel)
			fi, err := os.Stat(dir)
			return dir, err == nil && fi.IsDir()
		}
		up := filepath.Dir(d)
		if up == d {
			return "", false
		}
		d = up
	}
}

// Names lists the captures in dir, by file name without extension.
func Names(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = strings.TrimSuffix(filepath.Base(p), ".pcap")
	}
	return names, nil
}

// Read returns the Homa packets of the pcap file at path, in order.
func Read(path string) (pkts []Packet, err error) {
	r, err := pcapfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, r.Close()) }()
	for rec, err := range r.Records() {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		src, _, proto, tos, payload, err := pcapfile.IPPayload(rec.Frame, r.LinkType())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if proto == 146 {
			pkts = append(pkts, Packet{TX: src == Peer, TOS: tos, IPLen: 20 + len(payload), Homa: payload})
		}
	}
	return pkts, nil
}

// Load reads every capture in dir.
func Load(dir string) ([]Capture, error) {
	names, err := Names(dir)
	if err != nil {
		return nil, err
	}
	caps := make([]Capture, len(names))
	for i, name := range names {
		pkts, err := Read(filepath.Join(dir, name+".pcap"))
		if err != nil {
			return nil, err
		}
		caps[i] = Capture{Name: name, Packets: pkts}
	}
	return caps, nil
}
