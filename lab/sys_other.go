//go:build !linux

package lab

import (
	"errors"
	"syscall"
)

// platformOK reports why labs cannot run on this system.
func platformOK() error {
	return errors.New("lab: network namespaces need Linux")
}

func sysProcAttr() *syscall.SysProcAttr { return nil }
