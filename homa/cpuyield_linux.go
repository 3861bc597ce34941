package homa

import "syscall"

// yieldCPU gives the calling thread's processor to any other thread the
// kernel has queued on it, and returns at once when there is none
// (sched_yield). It is a raw system call: the thread keeps its P, so the
// runtime starts no other thread for the P's goroutines meanwhile.
func yieldCPU() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
