package syscmd

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	out, err := Run("hello\n", "cat")
	if err != nil || out != "hello\n" {
		t.Errorf("cat: %q, %v; want the input back", out, err)
	}
	_, err = Run("", "sh", "-c", "echo broken >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "sh -c") || !strings.Contains(err.Error(), "broken") {
		t.Errorf("failing command: %v; want an error quoting the command and its output", err)
	}
}
