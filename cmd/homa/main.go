// Command homa runs Homa echo servers and clients, compares Homa with
// TCP and gRPC, and helps operate and debug the transport.
//
//	homa serve --addr 127.0.0.1:4000      echo server (--metrics for Prometheus)
//	homa ping --addr 127.0.0.1:4000       latency of one-at-a-time RPCs
//	homa demo                             both of the above in one process
//	homa bench --proto homa,tcp,grpc      latency, throughput or workload runs
//	homa bench --proto layers             the RPC layers (erpc, a gRPC stub) against bare Homa
//	homa lab --proto homa,tcp             hosts in network namespaces under load
//	homa stat                             what changed in a process's metrics
//	homa capture --iface lo               decoded Homa packets (tcpdump for Homa)
//
// Raw IP sockets (protocol 146) need CAP_NET_RAW; --udp carries Homa in
// UDP datagrams instead, which needs no privileges.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

const usage = `usage: homa <command> [flags]

Homa is a receiver-driven datacenter RPC transport (IP protocol 146).

commands:
  serve  --addr HOST:PORT [--proto homa|homa-udp|tcp|grpc|erpc|erpc-udp|stub-homa|stub-homa-udp|stub-tcp]
         [--udp] [--reply-size N] [--shards N] [--link-mbps M] [--metrics HOST:PORT]
         run an echo server (or one replying N bytes) until interrupted; port 0 picks a free one
  ping   --addr HOST:PORT [--size N] [--count N] [--warmup N] [--udp] [--metrics HOST:PORT]
         send requests one at a time, check each echo, report RTT percentiles
  demo   [--udp] [--size N] [--count N] [--metrics HOST:PORT]
         serve and ping on loopback in one process (UDP if raw is not permitted)
  bench  [--mode latency|throughput|workload] [--proto LIST] [--size N | --workload w1..w5]
         [--count N] [--clients M --outstanding N] [--load-mbps X --duration D]
         [--target HOST:PORT | --in-process | --split-cpus] [--json] [--plot F.svg|F.png] [--progress]
         Homa over raw IP and UDP against Go TCP, gRPC, Go UDP and a raw-socket floor, and
         (--proto layers) the RPC layers: erpc and a gRPC stub over Homa and over gRPC-go/TCP;
         each server in a child process: RTT percentiles, slowdown by message size, RPCs/s,
         Gbit/s, CPU per RPC of both processes
  capture --file X.pcap | --iface NAME [--count N] [--port P] [--udp] [--write OUT.pcap]
         print Homa packets one per line, from a pcap file or live (tcpdump for Homa)
  lab    [--hosts N] [--rate 1gbit] [--proto homa,tcp] [--workload w4] [--load 0.8] [--plot F] | --cleanup
         hosts in network namespaces behind a rate-limited switch: slowdown under load (root)
  sim    [--workload w1..w5] [--load 0.8] [--duration 10ms] [--hosts 144] [--proto homa,dctcp,srpt] [--json] [--plot F]
         simulate a leaf-spine datacenter running the real Homa core (package dcsim)
  stat   [--url URL] [--interval D] [--count N] [--match REGEXP]
         print what changed in a running command's /metrics, every interval
         (histogram p50/p99 interpolated within the buckets, which for sizes are powers of two)
  help   show this text

Every command that sends load also takes --timeout (default 60s).
"homa <command> -h" lists a command's flags. Flags are written --name (-name
works too); --proto names the protocols of serve, bench and lab. Older
spellings still work and are not listed: lab --protos, bench --vs LIST
(the same as --proto homa,homa-udp,LIST).

Raw IP sockets need CAP_NET_RAW: run as root or grant it with
"setcap cap_net_raw+ep $(command -v homa)". --udp (or --proto homa-udp) carries Homa in
UDP datagrams instead (no privileges; both ends must use it).
`

// command runs one subcommand and returns the exit code.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

var commands = map[string]command{
	"serve":   runServe,
	"ping":    runPing,
	"demo":    runDemo,
	"bench":   runBench,
	"stat":    runStat,
	"capture": runCapture,
	"lab":     runLab,
	"sim":     runSim,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program: it dispatches args to a subcommand. Exit codes:
// 0 success, 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		cmd, ok := commands[name]
		if !ok {
			fmt.Fprintf(stderr, "homa: unknown command %q (%s); run 'homa help'\n", name, strings.Join(slices.Sorted(maps.Keys(commands)), ", "))
			return 2
		}
		return cmd(ctx, args[1:], stdout, stderr)
	}
}

// newFlags makes the flag set of a subcommand; synopsis is its usage line.
// Flags are written --name in help, as everywhere in this command (the
// flag package accepts -name too).
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("homa "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: homa %s %s\n\nflags:\n", name, synopsis)
		printFlags(stderr, fs)
	}
	return fs
}

// hiddenMark starts the usage text of a flag that help leaves out: an
// older spelling kept working for scripts.
const hiddenMark = "\x00"

// alias makes old another name of the flag current, one that help does
// not list.
func alias(fs *flag.FlagSet, old, current string) {
	fs.Var(fs.Lookup(current).Value, old, hiddenMark+"older spelling of --"+current)
}

// hide leaves the flag name out of help; it keeps working.
func hide(fs *flag.FlagSet, name string) {
	f := fs.Lookup(name)
	f.Usage = hiddenMark + f.Usage
}

// printFlags lists the flags of fs that are not hidden, as
// flag.PrintDefaults does but with two dashes.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, hiddenMark) {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		var b strings.Builder
		b.WriteString("  --" + f.Name)
		if arg != "" {
			b.WriteString(" " + arg)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !isZeroValue(f) {
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isString := g.Get().(string); isString {
					fmt.Fprintf(&b, " (default %q)", f.DefValue)
					fmt.Fprintln(w, b.String())
					return
				}
			}
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, b.String())
	})
}

// isZeroValue reports whether the flag's default is its type's zero
// value, which help does not show.
func isZeroValue(f *flag.Flag) (zero bool) {
	defer func() {
		if recover() != nil {
			zero = false
		}
	}()
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	v, ok := z.Interface().(flag.Value)
	return ok && f.DefValue == v.String()
}

// parseFlags parses args and runs check. It returns -1 to go on, or the
// exit code to stop with: 0 after -h (which lists the flags), 2 after a
// usage error, which it reports in one line naming the command and the
// flag, and then how to list the flags.
func parseFlags(fs *flag.FlagSet, args []string, check func() error) int {
	// The flag package prints its errors and the flag list itself: it
	// prints nothing here, and -h lists the flags below.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return 0
	}
	if err != nil {
		err = flagError(err)
	} else if err = check(); err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(out, "%s: %v\nrun '%s --help'\n", fs.Name(), err, fs.Name())
		return 2
	}
	return -1
}

// flagErrors rewrite the flag package's errors, which write a flag
// -name, in this command's words and spelling (--name).
var flagErrors = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^flag provided but not defined: --?(.*)$`), "unknown flag --$1"},
	{regexp.MustCompile(`^flag needs an argument: --?(.*)$`), "--$1 needs a value"},
	{regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?--?([^:]+): (.*)$`), "--$2: invalid value $1 ($3)"},
	{regexp.MustCompile(`^bad flag syntax: (.*)$`), "bad flag syntax: $1 (flags are written --name or --name=value)"},
}

// flagError is err, an error of flag.FlagSet.Parse, in this command's
// words.
func flagError(err error) error {
	msg := err.Error()
	for _, e := range flagErrors {
		if e.re.MatchString(msg) {
			return errors.New(e.re.ReplaceAllString(msg, e.repl))
		}
	}
	return err
}
