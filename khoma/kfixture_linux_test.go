//go:build linux

package khoma

// Kernel fixtures: what the Homa module handed back to the conn of a
// Socket, recorded on the rig (kfixture_record_linux_test.go) and
// replayed in CI (kfixture_replay_linux_test.go). testdata/kernel/README.md
// describes the file format and how to record.

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/homa-go/homa/contract"
)

// fixtureVersion is the first line of every fixture file.
const fixtureVersion = "khoma-kernel-fixture 1"

// fxEvent is one line of a fixture: a conn call and its outcome, or a
// line of the scenario's transcript (what Socket returned).
type fxEvent struct {
	kind   string            // sendmsg, recvmsg, abort, close, out
	sock   int               // socket number in the scenario, from 1
	fields map[string]string // key=value fields
	text   string            // for out: the transcript line
}

func (e *fxEvent) hex(key string) []byte {
	b, err := hex.DecodeString(e.fields[key])
	if err != nil {
		panic(fmt.Sprintf("fixture: %s %s=%q: %v", e.kind, key, e.fields[key], err))
	}
	return b
}

func (e *fxEvent) int(key string) int {
	n, err := strconv.Atoi(e.fields[key])
	if err != nil {
		panic(fmt.Sprintf("fixture: %s %s=%q: %v", e.kind, key, e.fields[key], err))
	}
	return n
}

func (e *fxEvent) line() string {
	if e.kind == "out" {
		return fmt.Sprintf("out %s", e.text)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s sock=%d", e.kind, e.sock)
	for _, k := range fxKeys[e.kind] {
		if v, ok := e.fields[k]; ok {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	return b.String()
}

// fxKeys are the fields of each kind of event, in the order written.
var fxKeys = map[string][]string{
	"open":       {"local", "server", "port", "uapi"},
	"ioctl":      {"req", "in", "out", "rpcs", "err"},
	"setsockopt": {"name", "in", "err"},
	"sendmsg":    {"dst", "len", "in", "out", "err"},
	"recvmsg":    {"returned", "out", "name", "n", "err", "took"},
	"region":     {"off", "data"},
	"abort":      {"in", "err"},
	"close":      {"err"},
}

// fixture is one scenario recorded on one module.
type fixture struct {
	header []string // "key value" lines after the version
	events []fxEvent
}

func (f *fixture) write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, fixtureVersion)
	for _, h := range f.header {
		fmt.Fprintln(bw, h)
	}
	for i := range f.events {
		fmt.Fprintln(bw, f.events[i].line())
	}
	return bw.Flush()
}

func readFixture(path string) (*fixture, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	zr, err := gzip.NewReader(fh)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 4<<20) // a region line holds one bpage in hex
	if !sc.Scan() || sc.Text() != fixtureVersion {
		return nil, fmt.Errorf("%s: first line is not %q", path, fixtureVersion)
	}
	f := &fixture{}
	for sc.Scan() {
		line := sc.Text()
		kind, rest, _ := strings.Cut(line, " ")
		if kind == "out" {
			f.events = append(f.events, fxEvent{kind: kind, text: rest})
			continue
		}
		if _, ok := fxKeys[kind]; !ok {
			f.header = append(f.header, line)
			continue
		}
		e := fxEvent{kind: kind, fields: make(map[string]string)}
		for _, kv := range strings.Fields(rest) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("%s: bad field %q in %q", path, kv, line)
			}
			e.fields[k] = v
		}
		if e.sock, err = strconv.Atoi(e.fields["sock"]); err != nil {
			return nil, fmt.Errorf("%s: no socket number in %q", path, line)
		}
		f.events = append(f.events, e)
	}
	return f, sc.Err()
}

// rawBytes is the memory of *p.
func rawBytes[T any](p *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

func errnoField(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "0"
	case errors.Is(err, contract.ErrClosed):
		return "closed"
	case errors.As(err, &errno):
		return strconv.Itoa(int(errno))
	}
	return "other:" + strings.ReplaceAll(err.Error(), " ", "_")
}

// fxHost opens the sockets of a scenario: on the kernel (recording) or
// from a fixture (replaying).
type fxHost interface {
	open(t fxT, port uint16, server bool) *Socket
	// kernel opens a bare kernel socket (no Socket on it) and gives
	// the address and length of a receive region for it.
	kernel(t fxT) (k kernel, start, length uint64)
	// reading returns once s's reader waits in recvmsg.
	reading(s *Socket)
	// patience is how long a Recv may wait: long on the (slow) rig,
	// short in a replay, where every answer is at hand.
	patience() time.Duration
}

// fxT is what scenarios need of testing.T.
type fxT interface {
	Helper()
	Fatalf(string, ...any)
}

// transcript collects what Socket returned to a scenario.
type transcript struct{ lines []string }

func (tr *transcript) add(format string, args ...any) {
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

// errClass describes err as the application sees it: the errors of
// package homa it matches, the errno in its chain, Timeout, and its text.
func errClass(err error) string {
	if err == nil {
		return "nil"
	}
	var names []string
	for _, c := range []struct {
		name string
		err  error
	}{
		{"NoListener", contract.ErrNoListener}, {"HostUnreachable", contract.ErrHostUnreachable},
		{"PeerTimeout", contract.ErrPeerTimeout}, {"Aborted", contract.ErrAborted},
		{"Closed", contract.ErrClosed}, {"UnknownRPC", contract.ErrUnknownRPC},
		{"BadAddress", contract.ErrBadAddress}, {"BadBpages", ErrBadBpages},
	} {
		if errors.Is(err, c.err) {
			names = append(names, c.name)
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		names = append(names, "errno="+strconv.Itoa(int(errno)))
	}
	var op *contract.OpError
	if errors.As(err, &op) {
		names = append(names, fmt.Sprintf("op=%s timeout=%v", op.Op, op.Timeout()))
	}
	return fmt.Sprintf("[%s] %q", strings.Join(names, " "), err.Error())
}

func (tr *transcript) message(what string, m *contract.Message, err error) {
	if err != nil {
		tr.add("%s: err %s", what, errClass(err))
		return
	}
	sum := sha256.Sum256(m.Data)
	tr.add("%s: id=%d peer=%v cookie=%d len=%d sha256=%x err %s",
		what, m.ID, m.Peer, m.Cookie, len(m.Data), sum[:8], errClass(m.Err))
}

// fxPayload is the deterministic content of a scenario's message.
func fxPayload(size int, seed byte) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// fxScenario is a scenario: it drives Sockets opened on h and notes
// what they return in tr.
type fxScenario struct {
	name string
	run  func(t fxT, h fxHost, tr *transcript)
}

// Ports of the scenarios' servers (guest loopback). fxNoServer has no
// socket.
const (
	fxServerPort = 710
	fxNoServer   = 719
)

func fxRecv(t fxT, h fxHost, tr *transcript, what string, s *Socket, id uint64) *contract.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.patience())
	defer cancel()
	m, err := s.Recv(ctx, id)
	tr.message(what, m, err)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: no message in %v", what, h.patience())
	}
	return m
}

func fxSend(t fxT, tr *transcript, s *Socket, dst netip.AddrPort, data []byte, cookie uint64) uint64 {
	t.Helper()
	id, err := s.Send(dst, data, cookie)
	tr.add("send %d bytes to %v cookie=%d: id=%d err %s", len(data), dst, cookie, id, errClass(err))
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return id
}

var fxServer = netip.MustParseAddrPort("127.0.0.1:710")

// fxEcho: one RPC of each size, answered by an echo server socket on
// the same host; the server receives any, the client by id. 200,000
// and 1,000,000 bytes span 4 and 16 bpages.
func fxEcho(t fxT, h fxHost, tr *transcript) {
	srv := h.open(t, fxServerPort, true)
	cli := h.open(t, 0, false)
	for i, size := range []int{1, 100, 1400, 5000, 65536, 200000, 1000000} {
		data := fxPayload(size, byte(i))
		id := fxSend(t, tr, cli, fxServer, data, uint64(1000+i))
		req := fxRecv(t, h, tr, "server recv any", srv, 0)
		if req != nil && req.Err == nil {
			err := srv.Reply(req.Peer, req.ID, req.Data)
			tr.add("reply: err %s", errClass(err))
		}
		fxRecv(t, h, tr, "client recv by id", cli, id)
	}
	tr.add("client close: err %s", errClass(cli.Close()))
	tr.add("server close: err %s", errClass(srv.Close()))
}

// fxMany: three requests at once; the server receives them by
// receive-any and answers in reverse order; the client takes one
// response by receive-any and the others by id, so that one response
// is queued while Recv waits for another.
func fxMany(t fxT, h fxHost, tr *transcript) {
	srv := h.open(t, fxServerPort, true)
	cli := h.open(t, 0, false)
	var ids []uint64
	for i, size := range []int{300, 70000, 2000} {
		ids = append(ids, fxSend(t, tr, cli, fxServer, fxPayload(size, byte(10+i)), uint64(2000+i)))
	}
	var reqs []*contract.Message
	for range ids {
		if m := fxRecv(t, h, tr, "server recv any", srv, 0); m != nil && m.Err == nil {
			reqs = append(reqs, m)
		}
	}
	in, err := cli.Info(8)
	tr.add("client info: %s err %s", infoText(in), errClass(err))
	in, err = srv.Info(8)
	tr.add("server info: %s err %s", infoText(in), errClass(err))
	for i := len(reqs) - 1; i >= 0; i-- {
		tr.add("reply %d: err %s", i, errClass(srv.Reply(reqs[i].Peer, reqs[i].ID, reqs[i].Data)))
	}
	fxRecv(t, h, tr, "client recv by id (first sent)", cli, ids[0])
	fxRecv(t, h, tr, "client recv any", cli, 0)
	fxRecv(t, h, tr, "client recv any", cli, 0)
	tr.add("client close: err %s", errClass(cli.Close()))
	tr.add("server close: err %s", errClass(srv.Close()))
}

// fxNoListener: requests to a port without a socket; the module's ICMP
// port unreachable (to itself, on loopback) fails each RPC.
func fxNoListener(t fxT, h fxHost, tr *transcript) {
	cli := h.open(t, 0, false)
	dst := netip.MustParseAddrPort("127.0.0.1:719")
	for i, size := range []int{100, 5000} {
		id := fxSend(t, tr, cli, dst, fxPayload(size, byte(20+i)), uint64(3000+i))
		fxRecv(t, h, tr, "client recv by id", cli, id)
	}
	tr.add("client close: err %s", errClass(cli.Close()))
}

// fxAbort: a request the server receives but never answers is aborted
// (HOMAIOCABORT); Recv then knows no such RPC; a second one is aborted
// while a Recv waits for it.
func fxAbort(t fxT, h fxHost, tr *transcript) {
	srv := h.open(t, fxServerPort, true)
	cli := h.open(t, 0, false)
	id := fxSend(t, tr, cli, fxServer, fxPayload(100, 30), 4000)
	fxRecv(t, h, tr, "server recv any", srv, 0)
	tr.add("abort %d: err %s", id, errClass(cli.Abort(id)))
	id2 := fxSend(t, tr, cli, fxServer, fxPayload(100, 31), 4001)
	fxRecv(t, h, tr, "server recv any", srv, 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), h.patience())
		defer cancel()
		m, err := cli.Recv(ctx, id2)
		tr.message("client recv by id (aborted while waiting)", m, err)
	}()
	h.reading(cli)
	err := cli.Abort(id2)
	<-done
	tr.add("abort %d: err %s", id2, errClass(err))
	tr.add("abort %d again: err %s", id2, errClass(cli.Abort(id2)))
	tr.add("client close: err %s", errClass(cli.Close()))
	tr.add("server close: err %s", errClass(srv.Close()))
}

// fxCloseWaiting: the socket closes while its reader waits in recvmsg
// for a response that does not come.
func fxCloseWaiting(t fxT, h fxHost, tr *transcript) {
	srv := h.open(t, fxServerPort, true)
	cli := h.open(t, 0, false)
	id := fxSend(t, tr, cli, fxServer, fxPayload(100, 40), 5000)
	fxRecv(t, h, tr, "server recv any", srv, 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), h.patience())
		defer cancel()
		m, err := cli.Recv(ctx, id)
		tr.message("client recv by id (closed while waiting)", m, err)
	}()
	h.reading(cli)
	err := cli.Close()
	<-done
	tr.add("client close: err %s", errClass(err))
	tr.add("server close: err %s", errClass(srv.Close()))
}

var fxScenarios = []fxScenario{
	{"setup", fxSetup},
	{"echo", fxEcho},
	{"many", fxMany},
	{"nolistener", fxNoListener},
	{"abort", fxAbort},
	{"closewaiting", fxCloseWaiting},
}
