package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// asNobody returns a function that runs the homa command as user nobody
// (uid and gid 65534, no groups, no capabilities): the test binary,
// copied where nobody may run it, plays the command as it does for the
// lab. It skips the test unless this process is root and has setpriv.
func asNobody(t *testing.T) func(args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the command as another user (nobody)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to run the command as nobody")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir is private to root; this one is not.
	dir, err := os.MkdirTemp("", "homa-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "homa")
	if err := copyFile(self, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", exe}, args...)...)
		cmd.Dir = dir
		// A user's PATH, without the sbin folders where ip and tc live.
		cmd.Env = []string{labChildEnv + "=1", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code < 0 {
			t.Fatalf("%q as nobody: %v", args, err)
		}
		return code, out.String(), errOut.String()
	}
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestUnprivileged runs the command as a user with no privileges: what
// needs raw sockets or root fails at once and says what it needs, and
// what can run over UDP does.
func TestUnprivileged(t *testing.T) {
	homa := asNobody(t)

	// Raw protocols asked for by name: a one-line refusal, no table.
	code, out, errOut := homa("bench", "--proto", "homa", "--count", "10")
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 ||
		!strings.Contains(errOut, "CAP_NET_RAW") || !strings.Contains(errOut, "--proto homa-udp") {
		t.Errorf("bench --proto homa: exit %d, stdout %q, stderr %q; want 1, no report, one line naming CAP_NET_RAW and --proto homa-udp", code, out, errOut)
	}

	// The default protocols: the raw ones are skipped, with a reason; the
	// others are measured.
	code, out, errOut = homa("bench", "--count", "20", "--warmup", "2", "--proto", "homa-udp,udp")
	if code != 0 || !strings.Contains(out, "homa-udp ") {
		t.Errorf("bench --proto homa-udp,udp: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = homa("bench", "--count", "20", "--warmup", "2", "--vs", "udp")
	if code != 0 || !strings.Contains(out, "\n  homa-udp ") || !strings.Contains(out, "\n  udp ") ||
		!strings.Contains(errOut, "raw IP sockets not permitted (need CAP_NET_RAW); skipping homa ") {
		t.Errorf("bench --vs udp: exit %d, stdout %q, stderr %q; want homa-udp and udp measured, homa skipped", code, out, errOut)
	}

	// The lab needs root, and says so rather than that tc is missing.
	for _, args := range [][]string{{"lab"}, {"lab", "--cleanup"}} {
		code, out, errOut = homa(args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, "homa lab: needs root") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and one line saying it needs root", args, code, out, errOut)
		}
	}

	// serve without --udp: the advice; the demo falls back to UDP.
	code, out, errOut = homa("serve", "--addr", "127.0.0.1:0")
	if code != 1 || out != "" || !strings.Contains(errOut, "CAP_NET_RAW") || !strings.Contains(errOut, "--udp") {
		t.Errorf("serve: exit %d, stdout %q, stderr %q; want 1 and advice naming CAP_NET_RAW and --udp", code, out, errOut)
	}
	code, out, errOut = homa("demo", "--count", "20")
	if code != 0 || errOut != "homa: raw IP sockets not permitted (need CAP_NET_RAW); falling back to UDP encapsulation\n" {
		t.Errorf("demo: exit %d, stderr %q", code, errOut)
	}
	checkReport(t, out, 20, "UDP encapsulation")
}
