package docsnippets

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const sample = "# Title\n" +
	"\n" +
	"```go\n" +
	"package main\n" +
	"\n" +
	"import \"fmt\"\n" +
	"\n" +
	"func main() { fmt.Println(\"hi\") }\n" +
	"```\n" +
	"\n" +
	"```output\n" +
	"hi\n" +
	"```\n" +
	"\n" +
	"```go\n" +
	"func serve(s *sock.Socket) error { return http.ListenAndServe(\":0\", nil) }\n" +
	"```\n" +
	"text\n" +
	"```output\n" +
	"not this snippet's: text came between\n" +
	"```\n" +
	"    indented, not a fence\n" +
	"```sh\n" +
	"go test ./...\n" +
	"```\n" +
	"```go\n" +
	"ctx := context.Background()\n" +
	"_ = ctx\n" +
	"```\n" +
	"\n" +
	"```go\n" +
	"package main\n" +
	"\n" +
	"func main() { println() }\n" +
	"```\n" +
	"\n" +
	"It prints:\n" +
	"\n" +
	"```output\n" +
	"\n" +
	"```\n"

// TestExtract: the Go blocks are found with their lines, kinds and
// outputs, and each kind is wrapped as the package documentation says.
func TestExtract(t *testing.T) {
	got, err := Extract("x.md", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d snippets, want 4: %+v", len(got), got)
	}
	want := []struct {
		line   int
		kind   Kind
		main   bool
		output string
	}{{4, Program, true, "hi\n"}, {16, Declarations, false, ""}, {27, Statements, false, ""}, {32, Program, true, "\n"}}
	for i, w := range want {
		s := got[i]
		if s.Line != w.line || s.Kind() != w.kind || s.IsMain() != w.main || s.Output != w.output || s.HasOutput != (w.output != "") {
			t.Errorf("snippet %d: line %d, %v, main %v, output %q (%v); want line %d, %v, main %v, output %q",
				i, s.Line, s.Kind(), s.IsMain(), s.Output, s.HasOutput, w.line, w.kind, w.main, w.output)
		}
	}
	src, err := got[1].Source("p")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"package p\n", "\t\"github.com/homa-go/homa/sock\"\n", "\t\"net/http\"\n", "//line x.md:16\nfunc serve("} {
		if !strings.Contains(string(src), want) {
			t.Errorf("declarations: no %q in\n%s", want, src)
		}
	}
	src, err = got[2].Source("p")
	if err != nil {
		t.Fatal(err)
	}
	if want := "import (\n\t\"context\"\n)\n\nfunc _() {\n//line x.md:27\nctx := context.Background()\n"; !strings.Contains(string(src), want) {
		t.Errorf("statements: no %q in\n%s", want, src)
	}
	if _, err := Extract("x.md", []byte("```go\nx := 1\n")); err == nil {
		t.Error("an unclosed block is not an error")
	}
}

// moduleRoot is the folder of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = up
	}
}

// docFiles lists README.md and the Markdown files under docs/, relative
// to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// goCommand runs the go command in dir, bounded in time.
func goCommand(t *testing.T, dir string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// TestDocSnippets compiles every Go snippet of the documentation and
// runs every whole program, checking what it prints.
func TestDocSnippets(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	root := moduleRoot(t)
	var snippets []Snippet
	for _, file := range docFiles(t, root) {
		md, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Extract(file, md)
		if err != nil {
			t.Fatal(err)
		}
		snippets = append(snippets, s...)
	}
	var programs int
	for _, s := range snippets {
		if s.File == "README.md" && s.IsMain() {
			programs++
		}
	}
	if programs == 0 {
		t.Fatalf("README.md has no whole program to run (%d Go snippets in all)", len(snippets))
	}

	// The snippets become packages under internal/testkit/docsnippets/snippets/,
	// a folder that exists only in the go command's overlay.
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, s := range snippets {
		if !s.Formatted() {
			t.Errorf("%s:%d: the snippet is not laid out as gofmt would", s.File, s.Line)
		}
		name := fmt.Sprintf("snippet%d", i+1)
		src, err := s.Source(name)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(tmp, name+".go")
		if err := os.WriteFile(file, src, 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(root, "internal", "docsnippets", "snippets", name, "snippet.go")] = file
		pkgs = append(pkgs, "./internal/docsnippets/snippets/"+name)
	}
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := goCommand(t, root, append([]string{"build", "-overlay", ovFile}, pkgs...)...); err != nil {
		t.Fatalf("the documentation's snippets do not compile: %v\n%s", err, out)
	}

	// Programs are built where user nobody may run them.
	bin, err := os.MkdirTemp("", "homa-snippets-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range snippets {
		if !s.IsMain() {
			continue
		}
		exe := filepath.Join(bin, fmt.Sprintf("snippet%d", i+1))
		if out, err := goCommand(t, root, "build", "-overlay", ovFile, "-o", exe, pkgs[i]); err != nil {
			t.Fatalf("%s:%d: %v\n%s", s.File, s.Line, err, out)
		}
		t.Run(fmt.Sprintf("%s:%d", s.File, s.Line), func(t *testing.T) {
			runProgram(t, s, bin, exe, nil)
			if os.Geteuid() != 0 {
				return
			}
			setpriv, err := exec.LookPath("setpriv")
			if err != nil {
				t.Log("setpriv is not installed: the program is not run without privileges")
				return
			}
			runProgram(t, s, bin, setpriv, []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", exe})
		})
	}
}

// runProgram runs a snippet's program (exe with args) in dir and checks
// that it succeeds and prints the snippet's output.
func runProgram(t *testing.T, s Snippet, dir, exe string, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	who := "as this user"
	if args != nil {
		who = "as user nobody"
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v; stdout:\n%s\nstderr:\n%s", who, err, stdout.String(), stderr.String())
	}
	if s.HasOutput && stdout.String() != s.Output {
		t.Errorf("%s it printed\n%s\nthe documentation shows\n%s", who, stdout.String(), s.Output)
	}
	if stderr.Len() > 0 {
		t.Logf("%s, stderr:\n%s", who, stderr.String())
	}
}

// readme returns the README's snippets.
func readme(t *testing.T) (string, []Snippet) {
	t.Helper()
	root := moduleRoot(t)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippets, err := Extract("README.md", md)
	if err != nil {
		t.Fatal(err)
	}
	return string(md), snippets
}

// TestReadmePrograms: the README has a whole program, with the output
// it prints, for the socket API and for each RPC layer, importing the
// layer by the path its section names (TestDocSnippets runs them).
func TestReadmePrograms(t *testing.T) {
	md, snippets := readme(t)
	for _, pkg := range []string{"sock", "sock/erpc", "sock/netrpc", "sock/homagrpc"} {
		path := `"github.com/homa-go/homa/` + pkg + `"`
		found := false
		for _, s := range snippets {
			if s.IsMain() && s.HasOutput && strings.Contains(s.Code, "\n\t"+path+"\n") {
				found = true
			}
		}
		if !found {
			t.Errorf("README.md has no whole program with its output that imports %s", path)
		}
		if pkg != "sock" && !strings.Contains(md, "`github.com/homa-go/homa/"+pkg+"`") {
			t.Errorf("README.md does not name the import path of %s", pkg)
		}
	}
}

// TestReadmeGoVersion: the README names the Go version go.mod needs.
func TestReadmeGoVersion(t *testing.T) {
	md, _ := readme(t)
	mod, err := os.ReadFile(filepath.Join(moduleRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("no go directive in go.mod")
	}
	if want := fmt.Sprintf("Go %s.%s or later", m[1], m[2]); !strings.Contains(md, want) {
		t.Errorf("README.md does not say %q", want)
	}
}

// TestReadmeReplace follows the README's instructions for using the
// module from a checkout: a module of one's own with its go mod edit
// line (the checkout's path in place of ../homa-go) builds the README's
// first program. It works offline, from the module cache; it skips when
// the cache lacks the dependencies (a user, such as nobody, whose cache
// is empty).
func TestReadmeReplace(t *testing.T) {
	md, snippets := readme(t)
	line := regexp.MustCompile(`(?m)^    (go mod edit .*)$`).FindStringSubmatch(md)
	if line == nil || !strings.Contains(line[1], "=../homa-go") {
		t.Fatalf("README.md has no go mod edit line replacing the module with ../homa-go: %q", line)
	}
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "module lookup disabled by GOPROXY=off") {
			t.Skipf("skipping: the module cache lacks the dependencies, and the test does not download them: %s", out)
		}
		if err != nil {
			t.Fatalf("go %q: %v\n%s", args, err, out)
		}
	}
	run("mod", "init", "example.com/mine")
	args := strings.Fields(strings.ReplaceAll(line[1], "=../homa-go", "="+moduleRoot(t)))
	run(args[1:]...)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(snippets[0].Code), 0o644); err != nil {
		t.Fatal(err)
	}
	run("mod", "tidy")
	run("build", "-o", os.DevNull, ".")
}

// TestGRPCStubsDocumented: go doc of sock/homagrpc says where the stubs
// its snippet uses come from.
func TestGRPCStubsDocumented(t *testing.T) {
	out, err := goCommand(t, moduleRoot(t), "doc", "./sock/homagrpc")
	if err != nil {
		t.Fatalf("go doc: %v\n%s", err, out)
	}
	for _, want := range []string{"protoc-gen-go-grpc", "google.golang.org/grpc/cmd/protoc-gen-go-grpc", "google.golang.org/grpc/interop/grpc_testing"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("go doc ./sock/homagrpc does not say %q", want)
		}
	}
}

// TestDocImages: every image the documentation shows exists beside it,
// and an SVG one is well-formed XML with an <svg> root and a title.
func TestDocImages(t *testing.T) {
	root := moduleRoot(t)
	image := regexp.MustCompile(`!\[[^\]]*\]\(([^)\s]+)\)`)
	n := 0
	for _, file := range docFiles(t, root) {
		md, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range image.FindAllSubmatch(md, -1) {
			ref := string(m[1])
			if strings.Contains(ref, "://") {
				continue
			}
			n++
			path := filepath.Join(root, filepath.Dir(file), ref)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s shows %s: %v", file, ref, err)
				continue
			}
			if strings.HasSuffix(ref, ".svg") {
				if err := checkSVG(data); err != nil {
					t.Errorf("%s: %v", ref, err)
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("%d images in the documentation, want at least the three diagrams of docs/design.md", n)
	}
}

// checkSVG reports whether data is well-formed XML whose root is an
// <svg> element with a <title>.
func checkSVG(data []byte) error {
	dec := xml.NewDecoder(bytes.NewReader(data))
	var root string
	title := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			title = title || se.Name.Local == "title"
		}
	}
	if root != "svg" || !title {
		return fmt.Errorf("root element %q, title %v; want svg with a title", root, title)
	}
	return nil
}
