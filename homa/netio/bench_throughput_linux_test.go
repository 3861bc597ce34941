//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Throughput benchmarks: 1 MB messages from one Conn to another on
// loopback, as packets of MaxPacket bytes (a 60-byte header in Buf, the
// payload pointing into the message), against a Go TCP stream of the
// same bytes in the same run. The receiver copies each payload into a
// 1 MB message, as the engine reassembles messages (TCP reads straight
// into it). A window of two messages stands in for Homa's grants: the
// sender starts message i+2 once the receiver has the last packet of
// message i, so the socket buffers never overflow.
//
// Metrics: Gbit/s of payload delivered, packets per sendmmsg
// (pkts/send), per datagram (pkts/dgram: GSO), per recvmmsg (pkts/recv:
// GRO), the share of packets lost, CPU time (user and system, both
// ends) and allocations per 1 MB message.
// Raw IP runs with sendmmsg batches (and read batches) of 8 to 64. The
// machine is shared: compare kinds within one pass of all of them, run
// as separate processes so that passes interleave (-count repeats each
// benchmark in a row):
//
//	go test -c -o /tmp/netio.test ./homa/netio
//	for i in $(seq 8); do /tmp/netio.test -test.run '^$' -test.bench Throughput -test.benchtime 200x -test.benchmem; done

// Benchmark message layout.
const (
	benchMsgLen = 1 << 20
	benchHdrLen = 60
	benchWindow = 2
	// benchStall is how long the sender waits for the receiver to
	// report a message before it counts it lost and goes on.
	benchStall = 200 * time.Millisecond
	// Header fields (in the Homa common header's sender id and offset
	// places): message number, payload offset, last-packet flag.
	benchIDOff   = 20
	benchOffOff  = 12
	benchLastOff = 16
)

// benchKind is one way to carry the messages.
type benchKind struct {
	name   string
	udp    bool
	opt    Options
	batch  int  // sendmmsg messages and read batch
	borrow bool // the receiver reads with ReadBorrowed
}

func benchKinds(mtu int) []benchKind {
	o := func(gso, gro bool) Options {
		return Options{MTU: mtu, DisableGSO: !gso, DisableGRO: !gro}
	}
	var kinds []benchKind
	for _, batch := range []int{8, 16, 32, 64} {
		kinds = append(kinds, benchKind{name: "raw/batch=" + strconv.Itoa(batch), opt: Options{MTU: mtu}, batch: batch})
	}
	return append(kinds,
		benchKind{name: "udp/batch=16", udp: true, opt: o(false, false), batch: 16},
		benchKind{name: "udp/batch=64", udp: true, opt: o(false, false), batch: 64},
		benchKind{name: "udp-gso", udp: true, opt: o(true, false), batch: 64},
		benchKind{name: "udp-gso-gro", udp: true, opt: o(true, true), batch: 64},
		benchKind{name: "udp-gso-gro-borrow", udp: true, opt: o(true, true), batch: 64, borrow: true},
	)
}

func BenchmarkThroughput(b *testing.B) {
	for _, mtu := range []int{0, 1500} {
		group := "mtu=64K"
		if mtu > 0 {
			group = "mtu=" + strconv.Itoa(mtu)
		}
		b.Run(group+"/tcp", func(b *testing.B) { benchTCP(b, 0) })
		if mtu > 0 {
			// Loopback TCP segments by MSS only on paper (TSO and GRO
			// carry 64 KB): this is TCP with the offloads UDP gets.
			b.Run(group+"/tcp-mss", func(b *testing.B) { benchTCP(b, mtu-40-12) })
		}
		for _, k := range benchKinds(mtu) {
			b.Run(group+"/"+k.name, func(b *testing.B) { benchConns(b, k) })
		}
	}
}

// benchConns streams b.N messages from one Conn of kind k to another.
func benchConns(b *testing.B, k benchKind) {
	var x, y Conn
	if k.udp {
		x, y = openUDP(b, lo4, 0, &k.opt), openUDP(b, lo4, 0, &k.opt)
	} else {
		x, y = openRaw(b, lo4, 0, &k.opt), openRaw(b, lo4, 0, &k.opt)
	}
	x.(*sockConn).wr.batch = k.batch
	pkts, hdrs := benchMessage(x, y.Port(), lo4)
	acks := make(chan uint64, benchWindow+1)
	rx := &benchReceiver{conn: y, acks: acks, borrow: k.borrow, batch: k.batch}
	var wg sync.WaitGroup
	wg.Go(rx.run)
	tokens := benchWindow
	stall := time.NewTimer(time.Hour)
	stall.Stop()
	lost := 0
	wait := func() {
		stall.Reset(benchStall)
		select {
		case <-acks:
		case <-stall.C:
			lost++
		}
		stall.Stop()
	}
	b.SetBytes(benchMsgLen)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	id := uint64(0)
	for b.Loop() {
		if tokens == 0 {
			wait()
		} else {
			tokens--
		}
		id++
		for i := range hdrs {
			binary.BigEndian.PutUint64(hdrs[i][benchIDOff:], id)
		}
		if n, err := x.WriteBatch(pkts); n != len(pkts) || err != nil {
			b.Fatalf("WriteBatch = %d of %d, %v", n, len(pkts), err)
		}
	}
	for range benchWindow - tokens {
		wait()
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu
	b.StopTimer()
	y.Close()
	wg.Wait()
	if rx.err != nil {
		b.Fatal(rx.err)
	}
	sx, sy := x.(StatsConn).Stats(), y.(StatsConn).Stats()
	b.ReportMetric(float64(rx.bytes)*8/elapsed.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(ratio(sx.Written, sx.SendCalls), "pkts/send")
	b.ReportMetric(ratio(sx.Written, sx.SendDatagrams), "pkts/dgram")
	b.ReportMetric(ratio(sy.Read, sy.RecvCalls), "pkts/recv")
	b.ReportMetric(100*(1-ratio(sy.Read, sx.Written)), "%lost")
	b.ReportMetric(float64(cpu.Microseconds())/float64(id), "cpu-us/op")
	if lost > 0 {
		b.Logf("%d of %d messages lost their last packet", lost, id)
	}
}

// cpuTime is the CPU time, user and system, the process has used.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// benchMessage lays out one message as packets from c to port at dst:
// headers in hdrs, payloads pointing into a 1 MB buffer.
func benchMessage(c Conn, port uint16, dst netip.Addr) ([]Packet, [][benchHdrLen]byte) {
	msg := make([]byte, benchMsgLen)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	per := c.MaxPacket(dst) - benchHdrLen
	n := (benchMsgLen + per - 1) / per
	hdrs := make([][benchHdrLen]byte, n)
	pkts := make([]Packet, n)
	for i := range pkts {
		off := i * per
		end := min(off+per, benchMsgLen)
		h := hdrs[i][:]
		binary.BigEndian.PutUint16(h[0:], c.Port())
		binary.BigEndian.PutUint16(h[dstPortOff:], port)
		h[11] = 0x10 // DATA
		binary.BigEndian.PutUint32(h[benchOffOff:], uint32(off))
		if end == benchMsgLen {
			h[benchLastOff] = 1
		}
		pkts[i] = Packet{Buf: h, N: benchHdrLen, Payload: msg[off:end], Addr: dst}
	}
	return pkts, hdrs
}

// benchReceiver reads messages until its Conn closes, copying payloads
// into a message buffer and acknowledging each message's last packet.
type benchReceiver struct {
	conn   Conn
	acks   chan<- uint64
	borrow bool
	batch  int
	bytes  int64
	err    error
}

func (r *benchReceiver) run() {
	pkts := make([]Packet, r.batch)
	if !r.borrow {
		pkts = makePackets(r.batch, 1<<16)
	}
	read := r.conn.ReadBatch
	if r.borrow {
		read = r.conn.(BorrowReader).ReadBorrowed
	}
	msg := make([]byte, benchMsgLen)
	for {
		n, err := read(pkts)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				r.err = err
			}
			return
		}
		for i := range pkts[:n] {
			p := pkts[i].Bytes()
			if len(p) < benchHdrLen {
				continue
			}
			off := int(binary.BigEndian.Uint32(p[benchOffOff:]))
			r.bytes += int64(copy(msg[min(off, len(msg)):], p[benchHdrLen:]))
			if p[benchLastOff] != 0 {
				select {
				case r.acks <- binary.BigEndian.Uint64(p[benchIDOff:]):
				default:
				}
			}
		}
	}
}

// benchTCP streams b.N messages over a loopback TCP connection, with the
// maximum segment size set to mss when positive.
func benchTCP(b *testing.B, mss int) {
	setMSS := func(_, _ string, rc syscall.RawConn) error {
		if mss <= 0 {
			return nil
		}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, mss) }); err != nil {
			return err
		}
		return serr
	}
	lc := net.ListenConfig{Control: setMSS}
	ln, err := lc.Listen(b.Context(), "tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Control: setMSS}
	out, err := d.DialContext(b.Context(), "tcp4", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	in, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	msg := make([]byte, benchMsgLen)
	var wg sync.WaitGroup
	var got int64
	var rerr error
	wg.Go(func() {
		buf := make([]byte, benchMsgLen)
		for {
			n, err := io.ReadFull(in, buf)
			got += int64(n)
			if err != nil {
				if err != io.EOF {
					rerr = err
				}
				return
			}
		}
	})
	b.SetBytes(benchMsgLen)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	count := 0
	for b.Loop() {
		if _, err := out.Write(msg); err != nil {
			b.Fatal(err)
		}
		count++
	}
	out.(*net.TCPConn).CloseWrite()
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpu
	b.StopTimer()
	if rerr != nil {
		b.Fatal(rerr)
	}
	b.ReportMetric(float64(got)*8/elapsed.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(count), "cpu-us/op")
}
