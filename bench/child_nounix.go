//go:build !unix

package bench

import "syscall"

// childProcAttr: a server child stops when its standard input closes,
// which happens when bench exits.
func childProcAttr() *syscall.SysProcAttr { return nil }
