package bench

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/homa-go/homa/internal/testkit/socktest"
)

// childEnv, when set, makes the test binary play the server child of a
// run, the "serve --parent" of cmd/homa (which its own tests run for
// real): a run's children here are this program.
const childEnv = "HOMA_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(serveChild(os.Args[1:]))
	}
	os.Setenv(childEnv, "1")
	os.Exit(socktest.RunChecked(m))
}

// serveChild serves as "serve --parent --proto P --addr A" with the
// flags startChild passes, and returns the exit code.
func serveChild(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Bool("parent", false, "")
	proto := fs.String("proto", "", "")
	addr := fs.String("addr", "", "")
	var o ServerOptions
	fs.IntVar(&o.ReplySize, "reply-size", 0, "")
	fs.IntVar(&o.Engine.LinkMbps, "link-mbps", 0, "")
	fs.IntVar(&o.Engine.UnschedBytes, "unsched-bytes", 0, "")
	fs.DurationVar(&o.Engine.PollDuration, "poll", 0, "")
	polling := fs.String("polling", "adaptive", "")
	if len(args) == 0 || args[0] != "serve" || fs.Parse(args[1:]) != nil {
		fmt.Fprintf(os.Stderr, "test child: bad arguments %q\n", args)
		return 2
	}
	o.Engine.Polling, _ = ParsePolling(*polling)
	p, ok := LookupProtocol(*proto)
	local, err := netip.ParseAddrPort(*addr)
	if !ok || err != nil {
		fmt.Fprintf(os.Stderr, "test child: --proto %q --addr %q\n", *proto, *addr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := Serve(ctx, p, local, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("homa: %s server on %v\n", p.Name(), srv.Addr())
	ctx, cancel := context.WithCancel(ctx)
	go AnswerParent(ParentInput(), os.Stdout, srv, cancel)
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("homa: %s server stopped after %d requests\n", p.Name(), srv.Requests())
	return 0
}
