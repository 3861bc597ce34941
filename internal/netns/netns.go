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

	"github.com/homa-go/homa/internal/syscmd"
)

// Dev is the veth interface's name inside each namespace of a Pair.
const Dev = "veth0"

var seq atomic.Int32

// Name returns a new namespace name: prefix, this process's id and a
// sequence number ("hfn-1234-7"), which Sweep reads back.
func Name(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))
}

// ErrUnavailable is wrapped by Available's error when namespaces cannot
// be made for a reason of the host rather than a fault: the ip command
// is not installed, or the process lacks the privilege. Tests skip on
// it, and fail on any other error.
var ErrUnavailable = errors.New("network namespaces unavailable")

// Available reports why namespaces cannot be made here, or nil if they
// can: it looks for the ip command and the capabilities it needs, then
// makes and deletes a namespace named with prefix.
func Available(prefix string) error {
	if err := privileged(); err != nil {
		return err
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: the ip command (iproute2) is not installed: %w", ErrUnavailable, err)
	}
	name := Name(prefix) + "-probe"
	if _, err := syscmd.Run("", "ip", "netns", "add", name); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	return Delete(name)
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
