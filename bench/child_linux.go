package bench

import "syscall"

// childProcAttr puts a server child in a process group of its own, so
// that a Ctrl-C at the terminal reaches bench alone, and has the kernel
// kill it if the thread that started it ends (bench keeps that thread
// until the child is reaped), so that it dies with bench.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
