//go:build linux

package khoma

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homa-go/homa/contract"
)

// TestReplayKernelFixtures feeds what the module handed back on the rig
// (testdata/kernel/uapiNNN/*.txt.gz) to Sockets through a conn that
// replays it: the recorded homa_recvmsg_args and homa_sendmsg_args bytes,
// sockaddrs, lengths, errnos and receive-region bytes go through the
// Socket's decoding (argument layout, peerOf, the bpage ledger, Gather)
// and error mapping, and the scenario must return to the application
// exactly what it returned on the kernel. Each conn call must also ask
// for what the real one asked (destination, lengths, argument bytes,
// bpages given back).
func TestReplayKernelFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/kernel/uapi*/*.txt.gz")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kernel fixtures in testdata/kernel (%v)", err)
	}
	scenarios := make(map[string]fxScenario)
	for _, sc := range fxScenarios {
		scenarios[sc.name] = sc
	}
	seen := make(map[string]map[string]bool) // uapi dir -> scenarios
	for _, path := range files {
		dir := filepath.Base(filepath.Dir(path))
		if seen[dir] == nil {
			seen[dir] = make(map[string]bool)
		}
		t.Run(dir+"/"+strings.TrimSuffix(filepath.Base(path), ".txt.gz"), func(t *testing.T) {
			f, err := readFixture(path)
			if err != nil {
				t.Fatal(err)
			}
			name := f.headerValue("scenario")
			sc, ok := scenarios[name]
			if !ok {
				t.Fatalf("fixture of unknown scenario %q", name)
			}
			seen[dir][name] = true
			if arch := f.headerValue("arch"); arch != runtime.GOARCH {
				// The bytes are the recording machine's memory: another
				// architecture's layouts and byte order differ.
				t.Skipf("recorded on %s, this is %s", arch, runtime.GOARCH)
			}
			got, want := replay(t, f, sc), f.transcript()
			if !slices.Equal(got, want) {
				for i := range max(len(got), len(want)) {
					g, w := "(none)", "(none)"
					if i < len(got) {
						g = got[i]
					}
					if i < len(want) {
						w = want[i]
					}
					if g != w {
						t.Errorf("line %d:\n got  %s\n want %s", i+1, g, w)
					}
				}
			}
		})
	}
	for _, dir := range []string{"uapi613", "uapi617"} {
		if seen[dir] == nil {
			t.Errorf("no fixtures of %s in testdata/kernel", dir)
		}
	}
	for dir, names := range seen {
		for _, sc := range fxScenarios {
			if !names[sc.name] {
				t.Errorf("%s has no fixture of scenario %s", dir, sc.name)
			}
		}
	}
}

func (f *fixture) headerValue(key string) string {
	for _, h := range f.header {
		if k, v, _ := strings.Cut(h, " "); k == key {
			return v
		}
	}
	return ""
}

// transcript is what the Sockets returned when the fixture was recorded.
func (f *fixture) transcript() []string {
	var lines []string
	for _, e := range f.events {
		if e.kind == "out" {
			lines = append(lines, e.text)
		}
	}
	return lines
}

// replay runs sc on conns that replay f and returns its transcript.
func replay(t *testing.T, f *fixture, sc fxScenario) []string {
	h := &replayHost{t: t, conns: make(map[*Socket]*replayConn)}
	for _, e := range f.events {
		switch e.kind {
		case "open":
			h.opens = append(h.opens, e)
		case "out":
		case "region":
			c := h.conn(e.sock)
			last := &c.recv[len(c.recv)-1]
			last.regions = append(last.regions, e)
		case "recvmsg":
			c := h.conn(e.sock)
			c.recv = append(c.recv, fxRecvmsg{fxEvent: e})
		default:
			c := h.conn(e.sock)
			c.calls[e.kind] = append(c.calls[e.kind], e)
		}
	}
	var tr transcript
	sc.run(t, h, &tr)
	for _, c := range h.byNum {
		c.mu.Lock()
		if n := len(c.recv); n > 0 {
			t.Errorf("socket %d: %d recorded recvmsg calls not made", c.num, n)
		}
		for kind, es := range c.calls {
			if len(es) > 0 {
				t.Errorf("socket %d: %d recorded %s calls not made", c.num, len(es), kind)
			}
		}
		c.mu.Unlock()
	}
	return tr.lines
}

type replayHost struct {
	t     *testing.T
	opens []fxEvent
	byNum []*replayConn
	conns map[*Socket]*replayConn
}

func (h *replayHost) conn(num int) *replayConn {
	for len(h.byNum) < num {
		h.byNum = append(h.byNum, &replayConn{t: h.t, num: len(h.byNum) + 1,
			calls: make(map[string][]fxEvent), blocking: make(chan struct{}, 1), closed: make(chan struct{})})
	}
	return h.byNum[num-1]
}

func (h *replayHost) open(t fxT, port uint16, server bool) *Socket {
	t.Helper()
	if len(h.opens) == 0 {
		t.Fatalf("the scenario opens more sockets than were recorded")
	}
	e := h.opens[0]
	h.opens = h.opens[1:]
	got := e.int("port")
	if e.fields["server"] != strconv.FormatBool(server) || port != 0 && got != int(port) {
		t.Fatalf("open port %d server %v; recorded %s", port, server, e.line())
	}
	c := h.conn(e.sock)
	c.api = map[string]UAPI{"613": UAPI613, "617": UAPI617}[e.fields["uapi"]]
	c.buf = make([]byte, RegionBytes) // untouched pages cost nothing
	s := newSocket(c, netip.AddrPortFrom(netip.MustParseAddr(e.fields["local"]), uint16(got)))
	h.conns[s] = c
	h.t.Cleanup(func() { s.Close() })
	return s
}

func (h *replayHost) reading(s *Socket) {
	select {
	case <-h.conns[s].blocking:
	case <-time.After(10 * time.Second):
		h.t.Fatalf("the reader never waited in recvmsg")
	}
}

func (h *replayHost) patience() time.Duration { return 2 * time.Second }

type fxRecvmsg struct {
	fxEvent
	regions []fxEvent
}

// replayConn is a conn that gives back what the kernel gave back.
type replayConn struct {
	t        *testing.T
	num      int
	api      UAPI
	buf      []byte
	mu       sync.Mutex
	recv     []fxRecvmsg
	calls    map[string][]fxEvent
	blocking chan struct{} // recvmsg waits for close
	closed   chan struct{}
	once     sync.Once
}

// next takes the next recorded call of kind.
func (c *replayConn) next(kind string) (fxEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls[kind]) == 0 {
		c.t.Errorf("socket %d: %s beyond those recorded", c.num, kind)
		return fxEvent{}, false
	}
	e := c.calls[kind][0]
	c.calls[kind] = c.calls[kind][1:]
	return e, true
}

// errOf is the error a recorded err field stands for.
func errOf(field string) error {
	switch {
	case field == "0":
		return nil
	case field == "closed":
		return fmt.Errorf("%w: use of closed file (replayed)", contract.ErrClosed)
	}
	n, err := strconv.Atoi(field)
	if err != nil {
		return errors.New(field)
	}
	return syscall.Errno(n)
}

func (c *replayConn) region() []byte { return c.buf }
func (c *replayConn) uapi() UAPI     { return c.api }
func (c *replayConn) free() error    { return nil }

func (c *replayConn) sendmsg(dst netip.AddrPort, a *SendmsgArgs, data []byte) error {
	e, ok := c.next("sendmsg")
	if !ok {
		return syscall.EIO
	}
	if dst.String() != e.fields["dst"] || len(data) != e.int("len") || !bytes.Equal(rawBytes(a), e.hex("in")) {
		c.t.Errorf("socket %d: sendmsg(%v, %x, %d bytes); recorded %s", c.num, dst, rawBytes(a), len(data), e.line())
	}
	copy(rawBytes(a), e.hex("out"))
	return errOf(e.fields["err"])
}

func (c *replayConn) recvmsg(a *RecvmsgArgs, pages *Ledger) (int, netip.AddrPort, error) {
	c.mu.Lock()
	if len(c.recv) == 0 {
		c.mu.Unlock()
		c.t.Errorf("socket %d: recvmsg beyond those recorded", c.num)
		<-c.closed
		return 0, netip.AddrPort{}, contract.ErrClosed
	}
	e := c.recv[0]
	c.recv = c.recv[1:]
	c.mu.Unlock()

	before := pages.Returned()
	sent := pages.Fill(a)
	var loaded []string
	for _, off := range a.BpageOffsets[:sent] {
		loaded = append(loaded, strconv.FormatUint(uint64(off), 16))
	}
	if got := "[" + strings.Join(loaded, ",") + "]"; got != e.fields["returned"] {
		c.t.Errorf("socket %d: recvmsg gives back bpages %s; recorded %s", c.num, got, e.fields["returned"])
	}
	copy(rawBytes(a), e.hex("out"))
	n := e.int("n")
	err := errOf(e.fields["err"])
	var errno syscall.Errno
	errors.As(err, &errno)
	pages.Settle(Taken(sent, n, errno, a))
	if took := strconv.FormatUint(pages.Returned()-before, 10); took != e.fields["took"] {
		c.t.Errorf("socket %d: the kernel took %s bpages; recorded %s", c.num, took, e.fields["took"])
	}
	for _, r := range e.regions {
		off, perr := strconv.ParseUint(r.fields["off"], 16, 32)
		if perr != nil {
			c.t.Errorf("socket %d: region offset %q", c.num, r.fields["off"])
			continue
		}
		copy(c.buf[off:], r.hex("data"))
	}
	var name unix.RawSockaddrAny
	copy(rawBytes(&name), e.hex("name"))
	peer := peerOf(&name)
	if errors.Is(err, contract.ErrClosed) {
		// The kernel call was waiting when the socket closed.
		c.blocking <- struct{}{}
		<-c.closed
		return 0, netip.AddrPort{}, err
	}
	if err != nil {
		return -1, peer, err
	}
	return n, peer, nil
}

func (c *replayConn) abort(a *AbortArgs) error {
	e, ok := c.next("abort")
	if !ok {
		return syscall.EIO
	}
	if !bytes.Equal(rawBytes(a), e.hex("in")) {
		c.t.Errorf("socket %d: abort(%x); recorded %s", c.num, rawBytes(a), e.line())
	}
	return errOf(e.fields["err"])
}

func (c *replayConn) close() error {
	c.once.Do(func() { close(c.closed) })
	e, ok := c.next("close")
	if !ok {
		return nil
	}
	return errOf(e.fields["err"])
}
