// Package netns makes the network namespaces that the project's tests,
// the fault-injection harness (faultnet) and the lab run hosts in: names
// that say which process made them, so that the leftovers of a killed
// run are found and deleted; a pair of namespaces joined by a veth link
// with IPv4 and IPv6 addresses; and running a function or a command
// inside one. Everything goes through the ip command (iproute2), needs
// root, and works on Linux only; elsewhere the calls fail.
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/homa-go/homa/internal/tools/syscmd"
)

// Dev is the veth interface's name inside each namespace of a Pair.
const Dev = "veth0"

var seq atomic.Int32

// Name returns a new namespace name: prefix, this process's id and a
// sequence number ("hfn-1234-7"), which Sweep reads back.
func Name(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))
}

// Available reports what this host lacks to make namespaces: the
// capabilities (CAP_SYS_ADMIN, CAP_NET_ADMIN), the ip command, or the
// privilege, which it finds out by making and deleting a namespace named
// with prefix. Its errors wrap ErrUnavailable. A probe that fails for any other reason is a defect,
// not something the host lacks: Available then returns nil, so that a
// test that skips on its error goes on and NewPair reports the failure.
func Available(prefix string) error {
	if err := privileged(); err != nil {
		return err
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: the ip command (iproute2) is not installed: %w", ErrUnavailable, err)
	}
	name := Name(prefix) + "-probe"
	if _, err := syscmd.Run("", "ip", "netns", "add", name); err != nil {
		if notPermitted(err) {
			return fmt.Errorf("%w: cannot create network namespaces (needs root): %w", ErrUnavailable, err)
		}
		return nil
	}
	if err := Delete(name); err != nil && notPermitted(err) {
		return fmt.Errorf("%w: cannot delete network namespaces: %w", ErrUnavailable, err)
	}
	return nil
}

// ErrUnavailable marks the errors of Available: the host lacks what
// namespaces need.
var ErrUnavailable = errors.New("network namespaces are not available")

// notPermitted reports whether a failed ip command was refused the
// privilege: ip prints the strerror of EPERM or EACCES.
func notPermitted(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Operation not permitted") || strings.Contains(msg, "Permission denied")
}

// Delete deletes a namespace; one that does not exist is not an error.
// Processes still inside keep it alive until they exit.
func Delete(name string) error {
	_, err := syscmd.Run("", "ip", "netns", "del", name)
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return nil
	}
	return err
}

// List returns the names of the namespaces that start with prefix.
func List(prefix string) ([]string, error) {
	out, err := syscmd.Run("", "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.Lines(out) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names, nil
}

// Stale lists the namespaces named by Name with prefix whose process no
// longer exists (runs killed before their cleanup). Those of this
// process and of live ones are not stale.
func Stale(prefix string) ([]string, error) {
	names, err := List(prefix)
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, name := range names {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(name, prefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		stale = append(stale, name)
	}
	return stale, nil
}

// Exec runs the command args inside namespace ns and returns its output.
func Exec(ns string, args ...string) (string, error) {
	return syscmd.Run("", append([]string{"ip", "netns", "exec", ns}, args...)...)
}
