package main

import (
	"strings"
	"testing"
)

// TestSummarize: passing tests print nothing, a failed test prints its
// output, package lines pass through, skipped tests are listed with
// their reasons, and the exit status says whether anything failed.
func TestSummarize(t *testing.T) {
	const p = "github.com/homa-go/homa/lab"
	in := strings.Join([]string{
		`{"Action":"start","Package":"` + p + `"}`,
		`{"Action":"run","Package":"` + p + `","Test":"TestA"}`,
		`{"Action":"output","Package":"` + p + `","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"` + p + `","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}`,
		`{"Action":"pass","Package":"` + p + `","Test":"TestA"}`,
		`{"Action":"output","Package":"` + p + `","Test":"TestB","Output":"=== RUN   TestB\n"}`,
		`{"Action":"output","Package":"` + p + `","Test":"TestB","Output":"    lab_test.go:30: skipping: lab: needs root\n"}`,
		`{"Action":"output","Package":"` + p + `","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}`,
		`{"Action":"skip","Package":"` + p + `","Test":"TestB"}`,
		`{"Action":"output","Package":"` + p + `","Output":"PASS\n"}`,
		`{"Action":"output","Package":"` + p + `","Output":"ok  \tgithub.com/homa-go/homa/lab\t0.1s\n"}`,
		`{"Action":"pass","Package":"` + p + `"}`,
		`{"Action":"skip","Package":"github.com/homa-go/homa/spec/none"}`,
	}, "\n") + "\n"
	var out strings.Builder
	if code := summarize(strings.NewReader(in), &out); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	want := "ok  \tgithub.com/homa-go/homa/lab\t0.1s\n\n1 tests skipped:\n  lab TestB: skipping: lab: needs root\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}

	failing := strings.Join([]string{
		`{"Action":"output","Package":"` + p + `","Test":"TestC","Output":"=== RUN   TestC\n"}`,
		`{"Action":"output","Package":"` + p + `","Test":"TestC","Output":"    x_test.go:9: broken\n"}`,
		`{"Action":"output","Package":"` + p + `","Test":"TestC","Output":"--- FAIL: TestC (0.00s)\n"}`,
		`{"Action":"fail","Package":"` + p + `","Test":"TestC"}`,
		`{"Action":"skip","Package":"` + p + `","Test":"TestD"}`,
		`not json at all`,
	}, "\n") + "\n"
	out.Reset()
	if code := summarize(strings.NewReader(failing), &out); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	want = "=== RUN   TestC\n    x_test.go:9: broken\n--- FAIL: TestC (0.00s)\nnot json at all\n\n1 tests skipped:\n  lab TestD: (no reason given)\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}

	// A build failure fails the run.
	build := `{"ImportPath":"x","Action":"build-output","Output":"x.go:1: syntax error\n"}` + "\n" +
		`{"ImportPath":"x","Action":"build-fail"}` + "\n"
	out.Reset()
	if code := summarize(strings.NewReader(build), &out); code != 1 || out.String() != "x.go:1: syntax error\n" {
		t.Errorf("build failure: exit %d, printed %q", code, out.String())
	}
}
