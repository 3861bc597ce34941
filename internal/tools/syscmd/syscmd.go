// Package syscmd runs the system tools (ip, tc, nft) that set up test
// networks, each bounded in time, with errors that quote the command and
// what it printed.
package syscmd

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Timeout bounds every command.
const Timeout = 10 * time.Second

// Run runs the command args with stdin as its input and returns its
// combined output, or an error quoting the command and what it printed.
// It takes no context on purpose: teardown must still run after the
// caller's context has ended.
func Run(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
