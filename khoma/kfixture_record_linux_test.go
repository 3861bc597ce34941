//go:build linux

package khoma

import (
	"compress/gzip"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKernelRecordFixtures runs the fixture scenarios on the kernel
// module and writes what it handed back to $HOMA_RECORD/uapiNNN/. It runs
// only with HOMA_RECORD set (on the rig: testdata/kernel/README.md).
func TestKernelRecordFixtures(t *testing.T) {
	dir := os.Getenv("HOMA_RECORD")
	if dir == "" {
		t.Skip("HOMA_RECORD is not set: nothing to record")
	}
	c, _, err := openConn(netip.MustParseAddr("127.0.0.1"), 0, false)
	if err != nil {
		t.Fatalf("no kernel Homa socket to record: %v", err)
	}
	api := c.api
	c.close()
	c.free()
	if want := os.Getenv("HOMA_EXPECT_UAPI"); want != "" && want != uapiName(api) {
		t.Fatalf("the module speaks uapi %s, HOMA_EXPECT_UAPI wants %s", uapiName(api), want)
	}
	for _, sc := range fxScenarios {
		t.Run(sc.name, func(t *testing.T) {
			r := &recorder{t: t}
			var tr transcript
			sc.run(t, r, &tr)
			f := &fixture{header: []string{
				"scenario " + sc.name,
				"uapi " + uapiName(api),
				"module " + os.Getenv("HOMA_MODULE_COMMIT"),
				"arch " + runtime.GOARCH,
				"recorded " + time.Now().UTC().Format(time.RFC3339),
			}}
			r.mu.Lock()
			f.events = append(f.events, r.events...)
			r.mu.Unlock()
			for _, l := range tr.lines {
				f.events = append(f.events, fxEvent{kind: "out", text: l})
				t.Log(l)
			}
			path := filepath.Join(dir, "uapi"+uapiName(api), sc.name+".txt.gz")
			if err := writeFixture(path, f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func uapiName(u UAPI) string {
	switch u {
	case UAPI613:
		return "613"
	case UAPI617:
		return "617"
	}
	return strconv.Itoa(int(u))
}

func writeFixture(path string, f *fixture) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(fh)
	err = f.write(zw)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// recorder opens kernel sockets whose calls it records.
type recorder struct {
	t      *testing.T
	mu     sync.Mutex
	events []fxEvent
	nsock  int // sockets opened
}

func (r *recorder) newSock() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nsock++
	return r.nsock
}

func (r *recorder) add(e fxEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) open(t fxT, port uint16, server bool) *Socket {
	t.Helper()
	ip := netip.MustParseAddr("127.0.0.1")
	c, got, err := openConn(ip, port, server)
	if err != nil {
		t.Fatalf("open port %d: %v", port, err)
	}
	rc := &recConn{sysConn: c, r: r, sock: r.newSock()}
	r.add(fxEvent{kind: "open", sock: rc.sock, fields: map[string]string{
		"local": ip.String(), "server": strconv.FormatBool(server),
		"port": strconv.Itoa(int(got)), "uapi": uapiName(c.api)}})
	s := newSocket(rc, netip.AddrPortFrom(ip, got))
	r.t.Cleanup(func() { s.Close() })
	return s
}

// reading gives the reader time to enter recvmsg (the guest is slow).
func (r *recorder) reading(*Socket) { time.Sleep(300 * time.Millisecond) }

func (r *recorder) patience() time.Duration { return 20 * time.Second }

// recConn is a kernel socket whose calls are recorded.
type recConn struct {
	*sysConn
	r    *recorder
	sock int
}

func (c *recConn) ev(kind string, kv ...string) fxEvent {
	e := fxEvent{kind: kind, sock: c.sock, fields: make(map[string]string)}
	for i := 0; i < len(kv); i += 2 {
		e.fields[kv[i]] = kv[i+1]
	}
	return e
}

func (c *recConn) sendmsg(dst netip.AddrPort, a *SendmsgArgs, data []byte) error {
	in := hex.EncodeToString(rawBytes(a))
	err := c.sysConn.sendmsg(dst, a, data)
	c.r.add(c.ev("sendmsg", "dst", dst.String(), "len", strconv.Itoa(len(data)),
		"in", in, "out", hex.EncodeToString(rawBytes(a)), "err", errnoField(err)))
	return err
}

func (c *recConn) recvmsg(a *RecvmsgArgs, pages *Ledger) (int, netip.AddrPort, error) {
	queued := pages.queue[:min(len(pages.queue), HOMA_MAX_BPAGES)]
	returned := make([]string, len(queued))
	for i, off := range queued {
		returned[i] = strconv.FormatUint(uint64(off), 16)
	}
	before := pages.Returned()
	n, peer, err := c.sysConn.recvmsg(a, pages)
	name := rawBytes(&c.sysConn.name)[:unix.SizeofSockaddrInet6]
	evs := []fxEvent{c.ev("recvmsg", "returned", "["+strings.Join(returned, ",")+"]",
		"out", hex.EncodeToString(rawBytes(a)), "name", hex.EncodeToString(name),
		"n", strconv.Itoa(n), "err", errnoField(err),
		"took", strconv.FormatUint(pages.Returned()-before, 10))}
	if err == nil && n >= 0 {
		// The bytes the module stored, at the offsets it reported.
		offs := a.BpageOffsets[:min(int(a.NumBpages), HOMA_MAX_BPAGES)]
		for i, off := range offs {
			k := min(HOMA_BPAGE_SIZE, n-i*HOMA_BPAGE_SIZE)
			if k <= 0 || int(off)+k > len(c.buf) {
				break
			}
			evs = append(evs, c.ev("region", "off", strconv.FormatUint(uint64(off), 16),
				"data", hex.EncodeToString(c.buf[off:int(off)+k])))
		}
	}
	c.r.mu.Lock()
	c.r.events = append(c.r.events, evs...)
	c.r.mu.Unlock()
	return n, peer, err
}

func (c *recConn) abort(a *AbortArgs) error {
	in := hex.EncodeToString(rawBytes(a))
	err := c.sysConn.abort(a)
	c.r.add(c.ev("abort", "in", in, "err", errnoField(err)))
	return err
}

func (c *recConn) close() error {
	err := c.sysConn.close()
	c.r.add(c.ev("close", "err", errnoField(err)))
	return err
}
