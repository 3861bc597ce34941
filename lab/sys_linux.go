//go:build linux

package lab

import "syscall"

// platformOK reports why labs cannot run on this system: here, nil.
func platformOK() error { return nil }

// sysProcAttr makes a child process die with this one.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
