//go:build unix && !linux

package bench

import "syscall"

// childProcAttr has no Pdeathsig here: a server child stops when its
// standard input closes, which happens when bench exits.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
