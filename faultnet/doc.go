// Package faultnet runs Homa over the real kernel network stack between
// Linux network namespaces, and lets the kernel inject the faults: nftables
// drops a random fraction of Homa packets, tc limits a link's rate, and
// whole processes are killed.
//
// NewPair makes two fresh namespaces, A and B, joined by one veth pair
// (named veth0 on both sides) with the addresses 10.146.0.1/24 (A) and
// 10.146.0.2/24 (B). Nothing is created in the caller's own namespace, so
// the test range never leaks onto the host and parallel runs, each with
// its own namespaces, cannot collide even though they use the same
// addresses and Homa ports.
//
// Code runs inside a namespace as a child process: NS.Start re-executes the
// current binary under "ip netns exec", and ChildMain, called first thing
// in TestMain, runs the role the child was started for. See child_linux.go
// for why processes rather than threads.
//
// Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the
// ip, nft and tc commands; Available and Setup say why when they are
// missing so tests can skip. The package is Linux-only.
package faultnet
