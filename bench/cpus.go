package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// Split CPUs. On one machine a client and a server share its CPUs, which
// two hosts would not: the client's spinning and its goroutines' threads
// compete with the server's for the same processors, and each process's
// runtime sizes itself (GOMAXPROCS) for all of them. Config.SplitCPUs
// gives each side CPUs of its own: the clients (this process) the first
// half of those it may run on, each server child the second half, and
// each process's GOMAXPROCS its half, as on two hosts with half the
// machine's CPUs each. Protocols that run both ends in this process
// (udp, floor) run on the clients' half.

// cpuSplit is the CPUs of each side of a split run.
type cpuSplit struct {
	clients, server []int
}

// splitCPUs divides the CPUs allowed (in order) into a first half for
// the clients and the rest for the server; the server has the extra one
// of an odd count, since it serves every client.
func splitCPUs(allowed []int) (cpuSplit, error) {
	if len(allowed) < 2 {
		return cpuSplit{}, fmt.Errorf("--split-cpus needs at least 2 CPUs to split, and this process may run on %d", len(allowed))
	}
	half := len(allowed) / 2
	return cpuSplit{clients: allowed[:half:half], server: allowed[half:]}, nil
}

// cpuList writes CPU numbers as the kernel's lists do: "0-3,8".
func cpuList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}
