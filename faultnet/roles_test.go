//go:build linux

package faultnet_test

// The two roles the tests' child processes play, and the line protocol
// between them and the test.
//
// A request is an 8-byte tag unique to the RPC, one op byte, and filler
// derived from the tag; the server answers an echo with the request itself.
//
//	server -addr A:P [-workers N] [-reclaim-ticks N]
//	  prints "ready" once it listens and "got <tag>" for each hang or
//	  slow request; "report" -> "report {json}"; ends when stdin closes.
//	client -addr A:0 -server A:P [-peer-timeout D]
//	  "load {json}"    -> "result {json}"
//	  "call <op> <ms>" -> "sent <tag>", then "done <outcome>"
//	  "send <op>"      -> "sent <tag>" (the response is never awaited)

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/faultnet"
	"github.com/homa-go/homa/homa"
	"github.com/homa-go/homa/homa/core"
	"github.com/homa-go/homa/homa/netio"
	"github.com/homa-go/homa/sock"
)

var roles = map[string]faultnet.Role{"server": serverRole, "client": clientRole}

// Request ops.
const (
	opEcho = iota // reply at once with the request
	opHang        // never reply
	opSlow        // reply with the request after slowReply
)

const slowReply = 50 * time.Millisecond

var opNames = []string{"echo", "hang", "slow"}

const tagLen = 8

// request builds the request of RPC tag: tag, op, and size-9 bytes of
// filler that depend on the tag, so a misplaced byte is noticed.
func request(tag uint64, op byte, size int) []byte {
	b := make([]byte, max(size, tagLen+1))
	binary.BigEndian.PutUint64(b, tag)
	b[tagLen] = op
	r := rand.New(rand.NewPCG(tag, uint64(size)))
	for i := tagLen + 1; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// out writes whole lines to stdout from many goroutines.
type out struct{ mu sync.Mutex }

func (o *out) line(format string, a ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", a...)
}

func (o *out) json(word string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	o.line("%s %s", word, b)
}

// serverReport is what the server says of the requests it executed.
type serverReport struct {
	Executions int      // handler runs
	Distinct   int      // distinct tags
	DupExecs   int      // runs beyond the first of a tag
	DupTags    []uint64 // a few tags that ran more than once
	ServerRPCs int      // server RPCs the engine holds now
	Stats      sock.Stats
}

// execCounter counts handler runs per tag.
type execCounter struct {
	mu     sync.Mutex
	counts map[uint64]int
}

func (e *execCounter) add(tag uint64) {
	e.mu.Lock()
	e.counts[tag]++
	e.mu.Unlock()
}

func (e *execCounter) report(s *homa.Endpoint) serverReport {
	r := serverReport{Stats: s.Stats()}
	r.ServerRPCs = r.Stats.ServerRPCs
	e.mu.Lock()
	defer e.mu.Unlock()
	r.Distinct = len(e.counts)
	for tag, n := range e.counts {
		r.Executions += n
		if n > 1 {
			r.DupExecs += n - 1
			if len(r.DupTags) < 5 {
				r.DupTags = append(r.DupTags, tag)
			}
		}
	}
	return r
}

func serverRole(args []string) int {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "", "address and Homa port to serve")
	workers := fs.Int("workers", 4, "goroutines receiving requests")
	reclaim := fs.Int("reclaim-ticks", 0, "ticks an answered RPC waits for its client before it is freed (0: default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	local := netip.MustParseAddrPort(*addr)
	conn, err := netio.OpenRaw(local.Addr(), local.Port(), &netio.Options{ReportUnreachable: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The engine itself: the reclaim time is a knob of the protocol
	// that sockets do not offer.
	s := homa.NewEndpoint(conn, homa.Config{Config: core.Config{Ack: ack.Config{ReclaimTicks: *reclaim}}})
	var o out
	ex := &execCounter{counts: make(map[uint64]int)}
	for range *workers {
		go serve(s, ex, &o)
	}
	o.line("ready")
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		if sc.Text() == "report" {
			o.json("report", ex.report(s))
		}
	}
	s.Close()
	return 0
}

// serve runs requests until the socket closes.
func serve(s *homa.Endpoint, ex *execCounter, o *out) {
	for {
		m, err := s.Recv(context.Background(), sock.Any)
		if err != nil {
			return
		}
		if len(m.Data) <= tagLen {
			m.Release()
			continue
		}
		tag := binary.BigEndian.Uint64(m.Data)
		ex.add(tag)
		switch m.Data[tagLen] {
		case opEcho:
			s.Reply(m.Peer.Addr(), m.ID, m.Data)
			m.Release()
		case opHang:
			o.line("got %d", tag)
			m.Release()
		case opSlow:
			o.line("got %d", tag)
			time.AfterFunc(slowReply, func() {
				s.Reply(m.Peer.Addr(), m.ID, m.Data)
				m.Release()
			})
		}
	}
}

// batch is count RPCs of size bytes.
type batch struct{ Size, Count int }

// load is what the client runs for a "load" command: the batches'
// RPCs, interleaved, by Concurrency goroutines, each RPC given Timeout
// and the whole load Deadline. FailFast stops at the first failure.
type load struct {
	Mix         []batch
	Concurrency int
	Timeout     time.Duration
	Deadline    time.Duration
	FailFast    bool
}

// latency summarises the completion times of one size, in microseconds.
type latency struct {
	N             int
	P50, P99, Max float64
}

// loadResult is the client's answer to a load.
type loadResult struct {
	OK, Failed int
	Errors     []string // the first few
	Latency    map[int]latency
	Stats      sock.Stats // the client socket's, at the end
}

// outcome names how a call ended, for "done".
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, sock.ErrPeerTimeout):
		return "peer-timeout"
	case errors.Is(err, sock.ErrNoListener):
		return "no-listener"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "error " + strings.ReplaceAll(err.Error(), "\n", " ")
}

type client struct {
	s    *sock.Socket
	srv  netip.AddrPort
	o    out
	tags atomic.Uint64
}

func clientRole(args []string) int {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "", "local address")
	srv := fs.String("server", "", "server address and port")
	peerTimeout := fs.Duration("peer-timeout", 0, "sock.Config.PeerTimeout (0: default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	s, err := sock.Open(netip.MustParseAddrPort(*addr), &sock.Config{PeerTimeout: *peerTimeout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	c := &client{s: s, srv: netip.MustParseAddrPort(*srv)}
	c.tags.Store(uint64(os.Getpid()) << 32)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if err := c.command(sc.Text()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

func (c *client) command(line string) error {
	word, arg, _ := strings.Cut(line, " ")
	switch word {
	case "load":
		var l load
		if err := json.Unmarshal([]byte(arg), &l); err != nil {
			return err
		}
		c.o.json("result", c.run(l))
	case "call", "send":
		opName, ms, _ := strings.Cut(arg, " ")
		op := slices.Index(opNames, opName)
		if op < 0 {
			return fmt.Errorf("unknown op %q", opName)
		}
		tag := c.tags.Add(1)
		req := request(tag, byte(op), 100)
		id, err := c.s.Send(c.srv, req, 0)
		if err != nil {
			return err
		}
		c.o.line("sent %d", tag)
		if word == "call" {
			timeout, err := strconv.Atoi(ms)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeout)*time.Millisecond)
			err = c.wait(ctx, id, req)
			cancel()
			c.o.line("done %s", outcome(err))
		}
	default:
		return fmt.Errorf("unknown command %q", line)
	}
	return nil
}

// wait waits for the response of RPC id, aborting it if ctx ends first,
// and checks that it echoes req.
func (c *client) wait(ctx context.Context, id uint64, req []byte) error {
	m, err := c.s.Recv(ctx, id)
	if err != nil {
		c.s.Abort(id)
		return err
	}
	defer m.Release()
	if m.Err != nil {
		return m.Err
	}
	if !bytes.Equal(m.Data, req) {
		return fmt.Errorf("RPC %d: response of %d bytes differs from the %d-byte request", id, len(m.Data), len(req))
	}
	return nil
}

// run runs a load and summarises it.
func (c *client) run(l load) loadResult {
	ctx, cancel := context.WithTimeout(context.Background(), l.Deadline)
	defer cancel()
	sizes := make(chan int)
	go func() {
		defer close(sizes)
		for _, size := range interleave(l.Mix) {
			select {
			case sizes <- size:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		mu  sync.Mutex
		res = loadResult{Latency: make(map[int]latency)}
		lat = make(map[int][]time.Duration)
		wg  sync.WaitGroup
	)
	for range max(l.Concurrency, 1) {
		wg.Go(func() {
			for size := range sizes {
				tag := c.tags.Add(1)
				req := request(tag, opEcho, size)
				start := time.Now()
				id, err := c.s.Send(c.srv, req, 0)
				if err == nil {
					rpcCtx, rpcCancel := context.WithTimeout(ctx, l.Timeout)
					err = c.wait(rpcCtx, id, req)
					rpcCancel()
				}
				took := time.Since(start)
				mu.Lock()
				switch {
				case err == nil:
					res.OK++
					lat[size] = append(lat[size], took)
				case ctx.Err() == nil: // not cut short by FailFast or Deadline
					res.Failed++
					if len(res.Errors) < 5 {
						res.Errors = append(res.Errors, fmt.Sprintf("%d-byte RPC tag %d after %v: %v", size, tag, took.Round(time.Millisecond), err))
					}
					if l.FailFast {
						cancel()
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil && !l.FailFast && res.Failed == 0 {
		res.Errors = append(res.Errors, "load deadline reached")
	}
	for size, d := range lat {
		res.Latency[size] = summarise(d)
	}
	res.Stats = c.s.Stats()
	return res
}

// interleave lists the sizes of the RPCs of mix, each batch spread evenly
// over the whole list.
func interleave(mix []batch) []int {
	type slot struct {
		at   float64
		size int
	}
	var slots []slot
	for _, b := range mix {
		for i := range b.Count {
			slots = append(slots, slot{(float64(i) + 0.5) / float64(b.Count), b.Size})
		}
	}
	slices.SortStableFunc(slots, func(a, b slot) int { return cmp.Compare(a.at, b.at) })
	sizes := make([]int, len(slots))
	for i, s := range slots {
		sizes[i] = s.size
	}
	return sizes
}

func summarise(d []time.Duration) latency {
	slices.Sort(d)
	us := func(q float64) float64 {
		return float64(d[min(int(q*float64(len(d))), len(d)-1)]) / float64(time.Microsecond)
	}
	return latency{N: len(d), P50: us(0.5), P99: us(0.99), Max: us(1)}
}
