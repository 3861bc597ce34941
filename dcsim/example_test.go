package dcsim_test

import (
	"fmt"
	"time"

	"github.com/homa-go/homa/dcsim"
)

// Run the real Homa core on 3 racks of 4 hosts under the W3 workload at
// half load, and compare it with the DCTCP-style baseline.
func ExampleRun() {
	cfg := dcsim.Config{Racks: 3, HostsPerRack: 4, Spines: 2, Workload: "w3", Load: 0.5,
		Duration: time.Millisecond, Seed: 1}
	for _, proto := range dcsim.Protocols {
		r, err := dcsim.Run(cfg, proto)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: every message delivered: %v, none faster than the idle fabric: %v\n",
			r.Proto, r.Incomplete == 0, r.MinSlowdown >= 1)
	}
	// Output:
	// homa: every message delivered: true, none faster than the idle fabric: true
	// dctcp: every message delivered: true, none faster than the idle fabric: true
	// srpt: every message delivered: true, none faster than the idle fabric: true
}
