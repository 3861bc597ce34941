//go:build !linux

package bench

import "errors"

var errSplitCPUs = errors.New("--split-cpus is built for Linux only")

func allowedCPUs() ([]int, error) { return nil, errSplitCPUs }

func pinProcess([]int) (func() error, error) { return nil, errSplitCPUs }

func onCPUs(cpus []int, start func() error) error {
	if len(cpus) > 0 {
		return errSplitCPUs
	}
	return start()
}
