package interop

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/homa-go/homa/homa/wire"
	"github.com/homa-go/homa/internal/capture/linuxcap"
)

// captureDir holds the captures of the Linux Homa module and their logs
// (interop/testdata/linux-captures).
var captureDir, _ = linuxcap.Dir()

// captureNames returns the names (file names without extension) of the
// captures; the test fails if there are none.
func captureNames(t *testing.T) []string {
	t.Helper()
	names, err := linuxcap.Names(captureDir)
	if captureDir == "" || err != nil || len(names) == 0 {
		t.Fatalf("no captures of the Linux module in %q (interop/testdata/linux-captures): %v", captureDir, err)
	}
	return names
}

// The decoded logs describe each packet on one line, for example
//
//	6.737ms RX from 10.146.12.2 tos=0xc0 ip_len=176 DATA   500->40000 id=1001   off=0 seq=0 seg_off=NONE(-1) paylen=100 ... [homa_len=156 doff=0xe0 flags=6 urg=0xb97d csum=0xc050]
//	34.035ms TX ACK 40000->500   id=1000   num_acks=1 acks=[(1000, 500)] [homa_len=80 ...]
//
// logHead matches the part every packet line has: direction (and for
// packets of the module, its TOS byte and IP length), type, ports and id.
var logHead = regexp.MustCompile(`^\s*[\d.]+ms (?:TX|RX from (\S+) tos=0x([0-9a-f]{2}) ip_len=(\d+)) +([A-Z_]+) +(\d+)->(\d+) +id=(\d+) +(.*)$`)

// typeCodes are the type bytes of WIRE.md, by the names the logs use.
var typeCodes = map[string]wire.Type{
	"DATA": 0x10, "GRANT": 0x11, "RESEND": 0x12, "RPC_UNKNOWN": 0x13,
	"BUSY": 0x14, "CUTOFFS": 0x15, "NEED_ACK": 0x17, "ACK": 0x18,
}

// logPacket is one packet line of a log, split into named values.
type logPacket struct {
	line   string
	tx     bool
	tos    uint8 // RX only
	ipLen  int   // RX only
	typ    wire.Type
	values map[string]string
	used   map[string]bool
	err    error // the first value that did not parse
}

// parseLog returns the packet lines of a capture's log.
func parseLog(t *testing.T, name string) []*logPacket {
	t.Helper()
	f, err := os.Open(filepath.Join(captureDir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pkts []*logPacket
	s := bufio.NewScanner(f)
	for s.Scan() {
		m := logHead.FindStringSubmatch(s.Text())
		if m == nil {
			continue // a note of the test tool ("=== ...", "(withholding ...)")
		}
		lp := &logPacket{line: strings.TrimSpace(s.Text()), tx: m[1] == "", values: map[string]string{}, used: map[string]bool{}}
		typ, ok := typeCodes[m[4]]
		if !ok {
			t.Fatalf("%s: unknown packet type in %q", name, lp.line)
		}
		lp.typ = typ
		if !lp.tx {
			tos, _ := strconv.ParseUint(m[2], 16, 8)
			lp.tos = uint8(tos)
			lp.ipLen, _ = strconv.Atoi(m[3])
		}
		lp.values["sport"], lp.values["dport"], lp.values["id"] = m[5], m[6], m[7]
		if err := splitValues(m[8], lp.values); err != nil {
			t.Fatalf("%s: %v in %q", name, err, lp.line)
		}
		pkts = append(pkts, lp)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return pkts
}

// splitValues adds the key=value items of s to values. Items are
// separated by spaces outside brackets and parentheses; an item in
// brackets without a key ("[homa_len=156 doff=0xe0 ...]") holds more
// items.
func splitValues(s string, values map[string]string) error {
	depth, start := 0, 0
	var items []string
	for i, c := range s + " " {
		switch c {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case ' ':
			if depth == 0 {
				if item := s[start:i]; item != "" {
					items = append(items, item)
				}
				start = i + 1
			}
		}
	}
	for _, item := range items {
		if strings.HasPrefix(item, "[") && strings.HasSuffix(item, "]") {
			if err := splitValues(item[1:len(item)-1], values); err != nil {
				return err
			}
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("item %q is not key=value", item)
		}
		if _, dup := values[k]; dup {
			return fmt.Errorf("%q twice", k)
		}
		values[k] = v
	}
	return nil
}

// value returns the text of key, marking it used.
func (lp *logPacket) value(key string) string {
	v, ok := lp.values[key]
	if !ok && lp.err == nil {
		lp.err = fmt.Errorf("no %s", key)
	}
	lp.used[key] = true
	return v
}

// number parses key as an unsigned number (decimal, or hex with 0x) of
// the given bits. "-1" and "NONE(-1)" stand for all ones.
func (lp *logPacket) number(key string, bits int) uint64 {
	v := lp.value(key)
	if v == "-1" || v == "NONE(-1)" {
		return 1<<bits - 1
	}
	n, err := strconv.ParseUint(v, 0, bits)
	if err != nil && lp.err == nil {
		lp.err = fmt.Errorf("%s=%q: %v", key, v, err)
	}
	return n
}

// list parses key as "[a, b, ...]" or "(a,b)" into numbers of the given
// bits; entries in parentheses inside the list are flattened.
func (lp *logPacket) list(key string, bits int) []uint64 {
	v := strings.NewReplacer("[", " ", "]", " ", "(", " ", ")", " ", ",", " ").Replace(lp.value(key))
	var ns []uint64
	for _, f := range strings.Fields(v) {
		n, err := strconv.ParseUint(f, 0, bits)
		if err != nil && lp.err == nil {
			lp.err = fmt.Errorf("%s: %q: %v", key, f, err)
		}
		ns = append(ns, n)
	}
	return ns
}

// common builds the common header from the line's values.
func (lp *logPacket) common() wire.Common {
	c := wire.Common{
		SrcPort:  uint16(lp.number("sport", 16)),
		DstPort:  uint16(lp.number("dport", 16)),
		Doff:     uint8(lp.number("doff", 8)),
		Flags:    uint8(lp.number("flags", 8)),
		Urgent:   uint16(lp.number("urg", 16)),
		Checksum: uint16(lp.number("csum", 16)),
		SenderID: lp.number("id", 64),
	}
	if lp.typ == typeCodes["DATA"] {
		c.Sequence = uint32(lp.number("seq", 32))
	}
	return c
}

// build encodes the packet the line describes, with homa/wire, from the
// line's values alone. For DATA it returns the 56-byte header and the
// payload length, since the logs do not show payload bytes.
func (lp *logPacket) build() (header []byte, payLen int, err error) {
	c := lp.common()
	switch lp.typ {
	case typeCodes["DATA"]:
		d := wire.Data{Common: c,
			MessageLength: uint32(lp.number("msg_len", 32)),
			Incoming:      uint32(lp.number("incoming", 32)),
			CutoffVersion: uint16(lp.number("cutoff_ver", 16)),
			Retransmit:    uint8(lp.number("rexmit", 8)),
			SegOffset:     uint32(lp.number("seg_off", 32)),
		}
		if a := lp.list("ack", 64); len(a) == 2 {
			d.Ack = wire.AckEntry{ClientID: a[0], ServerPort: uint16(a[1])}
		} else if lp.err == nil {
			lp.err = fmt.Errorf("ack has %d numbers", len(a))
		}
		// "off" is the offset the log's decoder derived; check it against
		// the rule of WIRE.md.
		off := uint32(lp.number("off", 32))
		if want := d.SegOffset; (want == 0xffffffff && off != d.Sequence) || (want != 0xffffffff && off != want) {
			lp.err = fmt.Errorf("off=%d does not follow from seq=%d seg_off=%d", off, d.Sequence, d.SegOffset)
		}
		payLen = int(lp.number("paylen", 16))
		header = wire.AppendDataHeader(nil, &d)
	case typeCodes["GRANT"]:
		g := wire.Grant{Common: c, Offset: uint32(lp.number("offset", 32)), Priority: uint8(lp.number("priority", 8))}
		header = g.Append(nil)
	case typeCodes["RESEND"]:
		r := wire.Resend{Common: c, Offset: uint32(lp.number("offset", 32)),
			Length: uint32(lp.number("length", 32)), Priority: uint8(lp.number("priority", 8))}
		header = r.Append(nil)
	case typeCodes["CUTOFFS"]:
		k := wire.Cutoffs{Common: c, Version: uint16(lp.number("version", 16))}
		vals := lp.list("cutoffs", 32)
		if len(vals) != len(k.Cutoffs) && lp.err == nil {
			lp.err = fmt.Errorf("%d cutoffs", len(vals))
		}
		for i := range min(len(vals), len(k.Cutoffs)) {
			k.Cutoffs[i] = uint32(vals[i])
		}
		header = k.Append(nil)
	case typeCodes["ACK"]:
		a := wire.Ack{Common: c, NumAcks: uint16(lp.number("num_acks", 16))}
		entries := lp.list("acks", 64)
		if len(entries)%2 != 0 || len(entries)/2 != min(int(a.NumAcks), wire.MaxAcks) {
			lp.err = fmt.Errorf("num_acks=%d with %d numbers in acks", a.NumAcks, len(entries))
		}
		for i := 0; i+1 < len(entries) && i/2 < wire.MaxAcks; i += 2 {
			a.Acks[i/2] = wire.AckEntry{ClientID: entries[i], ServerPort: uint16(entries[i+1])}
		}
		header = a.Append(nil)
	default: // RPC_UNKNOWN, BUSY, NEED_ACK: the common header only
		b := wire.Bare{Common: c}
		b.Type = lp.typ
		header = b.Append(nil)
	}
	if n := int(lp.number("homa_len", 32)); n != len(header)+payLen && lp.err == nil {
		lp.err = fmt.Errorf("homa_len=%d, but the fields make %d bytes", n, len(header)+payLen)
	}
	for k := range lp.values {
		if !lp.used[k] && lp.err == nil {
			lp.err = fmt.Errorf("value %s not used", k)
		}
	}
	return header, payLen, lp.err
}

// matchKey identifies a packet for matching log lines with captured
// packets: direction, (for the module's packets) TOS and IP length, the
// header bytes and the payload length.
func matchKey(tx bool, tos uint8, ipLen int, header []byte, payLen int) string {
	dir := "TX"
	if !tx {
		dir = fmt.Sprintf("RX tos=%#02x ip_len=%d", tos, ipLen)
	}
	return fmt.Sprintf("%s %x +%d", dir, header, payLen)
}

// capturedKey is matchKey for a captured packet.
func capturedKey(p linuxcap.Packet) string {
	n := len(p.Homa)
	if len(p.Homa) > 11 && wire.Type(p.Homa[11]) == typeCodes["DATA"] {
		n = min(n, wire.DataLen)
	}
	return matchKey(p.TX, p.TOS, p.IPLen, p.Homa[:n], len(p.Homa)-n)
}

// TestCapturesFromLogText rebuilds every packet the logs describe, with
// homa/wire, from the text of the log line alone (the logs were decoded
// independently of this code), and finds it byte for byte among the
// captured packets: every header byte, the checksum field included (the
// logs record it), and for DATA the payload length. Packets of the pcap
// files that no log line describes must be exactly the known gaps of the
// logs; those are checked by decoding and re-encoding them.
func TestCapturesFromLogText(t *testing.T) {
	var total, fromText, gaps int
	byType := map[wire.Type]int{}
	for _, name := range captureNames(t) {
		t.Run(name, func(t *testing.T) {
			captured, err := linuxcap.Read(filepath.Join(captureDir, name+".pcap"))
			if err != nil {
				t.Fatal(err)
			}
			total += len(captured)
			unmatched := map[string][]int{} // key -> indexes into captured
			for i, p := range captured {
				k := capturedKey(p)
				unmatched[k] = append(unmatched[k], i)
			}
			for _, lp := range parseLog(t, name) {
				header, payLen, err := lp.build()
				if err != nil {
					t.Errorf("%v: %s", err, lp.line)
					continue
				}
				k := matchKey(lp.tx, lp.tos, lp.ipLen, header, payLen)
				idx := unmatched[k]
				if len(idx) == 0 {
					t.Errorf("no captured packet is %x (+%d payload bytes), built from\n%s", header, payLen, lp.line)
					continue
				}
				unmatched[k] = idx[1:]
				fromText++
				byType[lp.typ]++
			}
			missing := map[string]int{}
			for _, idx := range unmatched {
				for _, i := range idx {
					p := captured[i]
					gaps++
					var dec wire.Packet
					if err := dec.Parse(p.Homa); err != nil {
						t.Errorf("packet %d, not in the log, does not decode: %v", i, err)
						continue
					}
					if out := dec.Append(nil); !bytes.Equal(out, p.Homa) {
						t.Errorf("packet %d, not in the log, re-encodes differently:\n got %x\nwant %x", i, out, p.Homa)
					}
					dir := "RX"
					if p.TX {
						dir = "TX"
					}
					missing[dir+" "+dec.Type.String()]++
				}
			}
			if want := linuxcap.LogGaps[name]; !maps.Equal(missing, want) && !(len(missing) == 0 && want == nil) {
				t.Errorf("captured packets not in the log: %v, want %v", missing, want)
			}
		})
	}
	t.Logf("%d Homa packets captured: %d rebuilt from the logs' text (%v), %d not in the logs (decode/re-encode only)",
		total, fromText, byType, gaps)
	if fromText+gaps != total {
		t.Errorf("%d + %d packets accounted for, %d captured", fromText, gaps, total)
	}
	for _, typ := range slices.Sorted(maps.Values(typeCodes)) {
		if byType[typ] == 0 {
			t.Errorf("no %v packet rebuilt from a log", typ)
		}
	}
}

// TestLogParser checks the log reader on hand-made lines, so that a log
// format it misreads fails here rather than passing by accident.
func TestLogParser(t *testing.T) {
	lines := []struct {
		line string
		hex  string
	}{
		{"  1.0ms TX ACK 40000->500   id=1000   num_acks=2 acks=[(1000, 500), (1002, 501)] [homa_len=80 doff=0x50 flags=6 urg=0xb97d csum=0x0000]",
			"9c4001f4 00000000 00000018 50060000 0000b97d 00000000000003e8 0002 00000000000003e801f4 00000000000003ea01f5" + strings.Repeat("0", 60)},
		{"  2.0ms RX from 10.146.12.2 tos=0xe0 ip_len=57 RESEND   500->40000 id=3001   offset=40000 length=-1 priority=7 [homa_len=37 doff=0x50 flags=6 urg=0xb97d csum=0xbeef]",
			"01f49c40 00000000 00000012 50060000 beefb97d 0000000000000bb9 00009c40 ffffffff 07"},
	}
	dir := t.TempDir()
	var text strings.Builder
	for _, l := range lines {
		text.WriteString(l.line + "\n    3.0ms === a note\n")
	}
	old := captureDir
	captureDir = dir
	defer func() { captureDir = old }()
	if err := os.WriteFile(filepath.Join(dir, "x.log"), []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	pkts := parseLog(t, "x")
	if len(pkts) != len(lines) {
		t.Fatalf("%d packet lines, want %d", len(pkts), len(lines))
	}
	for i, lp := range pkts {
		b, payLen, err := lp.build()
		want, _ := hex.DecodeString(strings.ReplaceAll(lines[i].hex, " ", ""))
		if err != nil || payLen != 0 || !bytes.Equal(b, want) {
			t.Errorf("line %d: %v\n got %x\nwant %x", i, err, b, want)
		}
	}
	if pkts[1].tx || pkts[1].tos != 0xe0 || pkts[1].ipLen != 57 || !pkts[0].tx {
		t.Errorf("directions and IP fields: %+v %+v", pkts[0], pkts[1])
	}
	// A value the builder does not use is an error, not silently ignored.
	lp := &logPacket{typ: typeCodes["BUSY"], values: map[string]string{}, used: map[string]bool{}}
	if err := splitValues("[homa_len=28 doff=0x50 flags=6 urg=0xb97d csum=0x0000] extra=1", lp.values); err != nil {
		t.Fatal(err)
	}
	lp.values["sport"], lp.values["dport"], lp.values["id"] = "1", "2", "3"
	if _, _, err := lp.build(); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Errorf("unused value: %v", err)
	}
}
