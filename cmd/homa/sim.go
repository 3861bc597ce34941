package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/homa-go/homa/dcsim"
)

// runSim simulates a leaf-spine datacenter whose hosts run the real Homa
// core (or the DCTCP-style baseline) under a workload: see package dcsim.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sim", "[--workload w1..w5] [--load 0.8] [--duration 10ms] [--hosts 144] [--proto homa,dctcp] [--seed N] [--json] [--plot F.svg|F.png]", stderr)
	var cfg dcsim.Config
	var workloads, protos, plot string
	var asJSON, quiet bool
	fs.StringVar(&workloads, "workload", "w4", "message sizes: w1..w5 or fixed:N (a comma-separated list runs each)")
	fs.Float64Var(&cfg.Load, "load", 0.8, "offered load: fraction of each host link's rate, in wire bytes")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Millisecond, "simulated time during which messages arrive")
	fs.IntVar(&cfg.Hosts, "hosts", 144, "hosts, spread over the racks")
	fs.IntVar(&cfg.Racks, "racks", 9, "racks (one ToR each)")
	fs.IntVar(&cfg.Spines, "spines", 4, "spine switches")
	fs.StringVar(&protos, "proto", "homa,dctcp", "protocols: homa, dctcp")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice")
	fs.IntVar(&cfg.Overcommit, "overcommit", 0, "Homa's overcommitment degree (0: the engine's default)")
	fs.IntVar(&cfg.SchedLevels, "sched-levels", 0, "Homa's scheduled priority levels (0: the engine's default)")
	fs.IntVar(&cfg.Incast, "incast", 0, "hosts sending to one at once in each incast burst (0: none)")
	fs.IntVar(&cfg.BufferBytes, "buffer", 0, "bytes of queue per switch port (0: 1 MiB)")
	fs.BoolVar(&cfg.StoreAndForward, "store-and-forward", false, "switches receive whole packets before sending them")
	fs.BoolVar(&cfg.ECMP, "ecmp", false, "hash flows onto spines instead of spraying packets")
	fs.BoolVar(&asJSON, "json", false, `print {"results": [...]} as JSON`)
	fs.BoolVar(&quiet, "quiet", false, "no progress bar on stderr")
	fs.StringVar(&plot, "plot", "", "draw slowdown by message size to this .svg or .png file")
	if code := parseFlags(fs, args, func() error {
		if cfg.Load <= 0 || cfg.Duration <= 0 {
			return errors.New("--load and --duration must be positive")
		}
		return nil
	}); code >= 0 {
		return code
	}
	var results []*dcsim.Result
	for _, w := range strings.Split(workloads, ",") {
		for _, p := range strings.Split(protos, ",") {
			if ctx.Err() != nil {
				return fail(stderr, "sim", ctx.Err())
			}
			c := cfg
			c.Workload = strings.TrimSpace(w)
			if !quiet {
				c.Progress = func(now, end time.Duration) {
					n := int(40 * now / max(end, 1))
					fmt.Fprintf(stderr, "\r%-6s %-3s [%-40s] %v", p, c.Workload, strings.Repeat("=", n), now.Round(time.Microsecond))
				}
			}
			r, err := dcsim.Run(c, strings.TrimSpace(p))
			if !quiet {
				fmt.Fprintln(stderr)
			}
			if err != nil {
				return fail(stderr, "sim", err)
			}
			results = append(results, r)
		}
	}
	if plot != "" {
		title := fmt.Sprintf("%d hosts, %.0f%% load", results[0].Hosts, 100*cfg.Load)
		if err := dcsim.WritePlot(plot, title, results); err != nil {
			return fail(stderr, "sim", err)
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"results": results}); err != nil {
			return fail(stderr, "sim", err)
		}
		return 0
	}
	if err := dcsim.WriteTable(stdout, results); err != nil {
		return fail(stderr, "sim", err)
	}
	return 0
}
