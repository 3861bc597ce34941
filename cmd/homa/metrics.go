package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/homa-go/homa/metrics"
	"github.com/homa-go/homa/sock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsFlag is the --metrics flag of the commands that open sockets:
// the address to serve Prometheus metrics on, empty for none.
type metricsFlag struct {
	addr string
}

func (m *metricsFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics while the command runs")
}

// check validates the flag's address.
func (m *metricsFlag) check() error {
	if m.addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(m.addr); err != nil {
		return fmt.Errorf("--metrics %q: %w", m.addr, err)
	}
	return nil
}

// namedSocket is a socket to export, and the value of its "socket" label.
type namedSocket struct {
	name string
	s    *sock.Socket
}

// metricsServer serves /metrics until close.
type metricsServer struct {
	srv  *http.Server
	done chan error
}

// serve starts serving the metrics of the sockets, the buffer pool, the
// Go runtime and the process, if the flag is set, and says where on
// stdout. The returned server (nil when the flag is not set) must be
// closed.
func (m *metricsFlag) serve(stdout io.Writer, socks ...namedSocket) (*metricsServer, error) {
	if m.addr == "" {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.NewBufferCollector(nil),
	)
	for _, ns := range socks {
		reg.MustRegister(metrics.NewCollector(ns.s.Stats, prometheus.Labels{"socket": ns.name}))
	}
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	ms := &metricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan error, 1),
	}
	go func() { ms.done <- ms.srv.Serve(ln) }()
	fmt.Fprintf(stdout, "homa: metrics at http://%v/metrics\n", ln.Addr())
	return ms, nil
}

// metricsShutdown bounds how long close waits for scrapes in progress.
const metricsShutdown = 5 * time.Second

// close stops the server and waits for it. A nil server is fine.
func (ms *metricsServer) close() error {
	if ms == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
	defer cancel()
	err := ms.srv.Shutdown(ctx)
	if serr := <-ms.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// stop closes the server once a command has finished with exit code
// code, and returns the command's exit code: 1 if closing failed after a
// success.
func (ms *metricsServer) stop(code int, name string, stderr io.Writer) int {
	if err := ms.close(); err != nil && code == 0 {
		return fail(stderr, name, err)
	}
	return code
}
