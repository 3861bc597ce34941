package layers

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// pkg is what go list says of one package of the module.
type pkg struct {
	ImportPath string
	Imports    []string
}

// load lists the module's packages and their imports (tests' imports
// left out: the rules are about what a program links).
func load(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the module has more", len(pkgs))
	}
	return pkgs
}

// TestLayers checks every package's imports against the rules.
func TestLayers(t *testing.T) {
	pkgs := load(t)
	for _, r := range rules {
		for _, name := range r.pkgs {
			if !slices.ContainsFunc(pkgs, func(p pkg) bool { return within(rel(p.ImportPath), name) }) {
				t.Errorf("rule %q names %s, which is not a package of the module", r.why, name)
			}
		}
	}
	for _, p := range pkgs {
		for _, v := range check(rel(p.ImportPath), p.Imports) {
			t.Error(v)
		}
	}
}

// TestRulesBite: each rule refuses an import it is there to refuse, so
// that a rule cannot rot into one that passes everything.
func TestRulesBite(t *testing.T) {
	for _, tc := range []struct {
		pkg, imports string
	}{
		{"khoma", module + "/homa"},
		{"khoma", module + "/homa/netio"},
		{"homa", module + "/khoma"},
		{"internal/transport/mailbox", module + "/homa/core"},
		{"homa/core", "net"},
		{"homa/core", "sync"},
		{"homa/core", module + "/homa/netio"},
		{"grant", "time/tzdata"},
		{"contract", module + "/homa"},
		{"metrics", module + "/homa"},
		{"cmd/homa", module + "/homa/netio"},
		{"cmd/homa", module + "/contract"},
		{"sock/erpc", module + "/homa"},
		{"homa", module + "/sock"},
		{"homa/netio", module + "/metrics"},
		{"homa/netio", module + "/internal/tools/workload"},
	} {
		if len(check(tc.pkg, []string{tc.imports})) == 0 {
			t.Errorf("%s importing %s passes the rules", tc.pkg, tc.imports)
		}
	}
	if v := check("homa/core", []string{"time", "math/bits", module + "/contract", module + "/grant"}); len(v) > 0 {
		t.Errorf("the core's own imports fail: %v", v)
	}
}

// check returns the rule violations of package p importing imports.
func check(p string, imports []string) []string {
	var out []string
	for _, r := range rules {
		if !r.applies(p) {
			continue
		}
		for _, imp := range imports {
			if r.refuses(imp) {
				out = append(out, p+" imports "+imp+": "+r.why)
			}
		}
	}
	return out
}

func (r rule) applies(p string) bool {
	return slices.ContainsFunc(r.pkgs, func(name string) bool { return within(p, name) })
}

func (r rule) refuses(imp string) bool {
	if r.allowStd != nil && !strings.Contains(strings.Split(imp, "/")[0], ".") {
		return !slices.Contains(r.allowStd, imp)
	}
	if !strings.HasPrefix(imp, module+"/") {
		return slices.Contains(r.deny, imp)
	}
	m := rel(imp)
	if r.allowModule != nil {
		return !slices.ContainsFunc(r.allowModule, func(name string) bool { return within(m, name) })
	}
	return slices.ContainsFunc(r.deny, func(name string) bool { return within(m, name) })
}

// within reports whether package p is name, or under it for a name
// ending in "/...".
func within(p, name string) bool {
	if base, ok := strings.CutSuffix(name, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == name
}

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}
