// Command testsummary reads the output of "go test -json" on its
// standard input and prints what plain "go test" would (each package's
// result, and the output of failed tests and of builds), then a summary
// of the tests that skipped, each with its reason. It exits 1 if a test,
// a package or a build failed, or if the input is not go test's JSON;
// scripts/test pipes go test through it:
//
//	go test -json ./... | go run ./scripts/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent), and
// the build events of go test -json.
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
}

// skip is one skipped test and why.
type skip struct {
	pkg, test, reason string
}

func main() {
	os.Exit(summarize(os.Stdin, os.Stdout))
}

// summarize reads go test -json from in, writes the plain output and
// the summary to out, and returns the exit status.
func summarize(in io.Reader, out io.Writer) int {
	type key struct{ pkg, test string }
	outputs := make(map[key][]string) // a running test's output lines
	var skips []skip
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go vet's findings, a panic before the test
			// binary ran): pass it on.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		k := key{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "build-fail":
			failed = true
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
				fmt.Fprint(out, e.Output)
			}
		case e.Action == "output":
			outputs[k] = append(outputs[k], e.Output)
		case e.Action == "fail":
			failed = true
			fmt.Fprint(out, strings.Join(outputs[k], ""))
			delete(outputs, k)
		case e.Action == "skip" && e.Test != "":
			skips = append(skips, skip{e.Package, e.Test, reason(outputs[k])})
			delete(outputs, k)
		case e.Action == "pass" || e.Action == "skip":
			delete(outputs, k)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testsummary: reading go test's output: %v\n", err)
		return 1
	}
	writeSkips(out, skips)
	if failed {
		return 1
	}
	return 0
}

// reason is what a skipped test logged, without go test's own lines
// (=== RUN, --- SKIP) and the file:line prefixes, on one line.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		if file, rest, ok := strings.Cut(l, ": "); ok && strings.Contains(file, ".go:") && !strings.Contains(file, " ") {
			l = rest
		}
		parts = append(parts, l)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}

// writeSkips prints the skipped tests by package, each with its reason.
func writeSkips(out io.Writer, skips []skip) {
	if len(skips) == 0 {
		return
	}
	slices.SortStableFunc(skips, func(a, b skip) int { return strings.Compare(a.pkg, b.pkg) })
	fmt.Fprintf(out, "\n%d tests skipped:\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(out, "  %s %s: %s\n", strings.TrimPrefix(s.pkg, "github.com/homa-go/homa/"), s.test, s.reason)
	}
}
