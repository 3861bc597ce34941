package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/homa-go/homa/dcsim"
)

// runSim simulates a leaf-spine datacenter whose hosts run the real Homa
// core (and the DCTCP-style baseline) under a workload: see package
// dcsim. Lists (--workload, --load, --proto, --overcommit) run every
// combination.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sim", "[--workload w1..w5] [--load 0.8] [--duration 10ms] [--hosts 144] [--proto homa,dctcp,srpt] [--shards N] [--seed N] [--json] [--plot F.svg|F.png]", stderr)
	var cfg dcsim.Config
	var workloads, loads, protos, overcommits, plot string
	var asJSON, quiet bool
	fs.StringVar(&workloads, "workload", "w4", "message sizes: w1..w5 or fixed:N (a list runs each)")
	fs.StringVar(&loads, "load", "0.8", "offered load: fraction of each host link, in wire bytes (a list runs each)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Millisecond, "simulated time during which messages arrive")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "first part of the run whose messages are not measured (0: a tenth of --duration)")
	fs.IntVar(&cfg.Hosts, "hosts", 144, "hosts, spread over the racks")
	fs.IntVar(&cfg.Racks, "racks", 9, "racks (one ToR each)")
	fs.IntVar(&cfg.Spines, "spines", 4, "spine switches")
	fs.StringVar(&protos, "proto", "homa,dctcp,srpt", "protocols: homa, dctcp, srpt (the ideal SRPT oracle)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of every random choice")
	fs.StringVar(&overcommits, "overcommit", "0", "Homa's overcommitment degree, 0 for the engine's default (a list runs each)")
	fs.IntVar(&cfg.SchedLevels, "sched-levels", 0, "Homa's scheduled priority levels (0: the engine's default)")
	fs.IntVar(&cfg.UnschedBytes, "unsched", 0, "Homa's unscheduled bytes per message (0: the engine's default)")
	fs.IntVar(&cfg.Shards, "shards", 0, "Homa: run each host's socket as `N` cores, a sharded socket's engines, which share one incoming budget and the pacing of the host's link (0 or 1: one core a host)")
	fs.BoolVar(&cfg.ShardsShareNothing, "shards-share-nothing", false, "Homa: with --shards, give every shard one core's incoming budget and a pacer at the link's rate of its own")
	fs.IntVar(&cfg.Incast, "incast", 0, "hosts sending to one at once in each incast burst (0: none)")
	fs.IntVar(&cfg.BufferBytes, "buffer", 0, "bytes of queue per switch port (0: 1 MiB)")
	fs.BoolVar(&cfg.StoreAndForward, "store-and-forward", false, "switches receive whole packets before sending them")
	fs.BoolVar(&cfg.ECMP, "ecmp", false, "hash flows onto spines instead of spraying packets")
	fs.BoolVar(&asJSON, "json", false, `print {"results": [...]} as JSON`)
	fs.BoolVar(&quiet, "quiet", false, "no progress bar on stderr")
	fs.StringVar(&plot, "plot", "", "draw slowdown by message size to this .svg or .png file")
	var loadList []float64
	var ocList []int
	if code := parseFlags(fs, args, func() (err error) {
		if loadList, err = parseList(loads, strconv.ParseFloat); err != nil {
			return fmt.Errorf("--load: %w", err)
		}
		ocList, err = parseList(overcommits, func(s string, _ int) (int, error) { return strconv.Atoi(s) })
		return err
	}); code >= 0 {
		return code
	}
	var results []*dcsim.Result
	for _, w := range strings.Split(workloads, ",") {
		for _, load := range loadList {
			for _, p := range strings.Split(protos, ",") {
				for i, oc := range ocList {
					if p = strings.TrimSpace(p); p != "homa" && i > 0 {
						break // the baseline has no overcommitment
					}
					if ctx.Err() != nil {
						return fail(stderr, "sim", ctx.Err())
					}
					c := cfg
					c.Workload, c.Load, c.Overcommit = strings.TrimSpace(w), load, oc
					if !quiet {
						c.Progress = func(now, end time.Duration) {
							fmt.Fprintf(stderr, "\r%s %s %.2f [%-40s] %v ", p, c.Workload, load, strings.Repeat("=", int(40*now/max(end, 1))), now.Round(time.Microsecond))
						}
					}
					r, err := dcsim.Run(c, p)
					if !quiet {
						fmt.Fprintln(stderr)
					}
					if err != nil {
						return fail(stderr, "sim", err)
					}
					results = append(results, r)
				}
			}
		}
	}
	if plot != "" {
		title := fmt.Sprintf("%d hosts: slowdown by message size", results[0].Hosts)
		if err := dcsim.WritePlot(plot, title, results); err != nil {
			return fail(stderr, "sim", err)
		}
	}
	var err error
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(map[string]any{"results": results})
	} else {
		err = dcsim.WriteTable(stdout, results)
	}
	if err != nil {
		return fail(stderr, "sim", err)
	}
	return 0
}

// parseList parses a comma-separated list of numbers.
func parseList[T any](s string, parse func(string, int) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
