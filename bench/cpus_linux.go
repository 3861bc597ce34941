package bench

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// allowedCPUs is the CPUs this thread may run on, in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading the CPUs this process may run on: %w", err)
	}
	return setCPUs(&set), nil
}

func setCPUs(set *unix.CPUSet) []int {
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

func cpuSet(cpus []int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// pinProcess confines every thread of this process to cpus and sizes
// GOMAXPROCS to them; restore undoes both, to the CPUs the process had.
// Threads started later inherit the mask of the thread that starts them.
func pinProcess(cpus []int) (restore func() error, err error) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		return nil, fmt.Errorf("reading the CPUs this process may run on: %w", err)
	}
	if err := setThreads(cpuSet(cpus)); err != nil {
		return nil, errors.Join(err, setThreads(&before))
	}
	prev := runtime.GOMAXPROCS(len(cpus))
	return func() error {
		err := setThreads(&before)
		if n, _ := strconv.Atoi(os.Getenv("GOMAXPROCS")); n > 0 {
			runtime.GOMAXPROCS(prev)
		} else {
			runtime.SetDefaultGOMAXPROCS()
		}
		return err
	}, nil
}

// setThreads sets the CPU mask of every thread of this process, twice
// over, so that a thread that one started while the first pass ran (with
// its starter's old mask) has the new one too.
func setThreads(set *unix.CPUSet) error {
	for range 2 {
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("listing this process's threads: %w", err)
		}
		for _, t := range tids {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			// A thread that has exited meanwhile is no error.
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("setting the CPUs of thread %d: %w", tid, err)
			}
		}
	}
	return nil
}

// onCPUs runs start on the calling goroutine's thread, which the caller
// has locked, confined to cpus meanwhile: a process it starts inherits
// them (and its runtime sizes GOMAXPROCS to them).
func onCPUs(cpus []int, start func() error) error {
	if len(cpus) == 0 {
		return start()
	}
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		return fmt.Errorf("reading this thread's CPUs: %w", err)
	}
	if err := unix.SchedSetaffinity(0, cpuSet(cpus)); err != nil {
		return fmt.Errorf("confining a server child to CPU %s: %w", cpuList(cpus), err)
	}
	err := start()
	return errors.Join(err, unix.SchedSetaffinity(0, &before))
}
