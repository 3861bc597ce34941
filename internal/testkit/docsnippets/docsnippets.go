package docsnippets

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"slices"
	"strings"
)

// Kind says how a snippet is compiled.
type Kind int

const (
	// Program is a whole file, package clause included.
	Program Kind = iota
	// Declarations are top-level declarations without a package clause.
	Declarations
	// Statements are the body of a function.
	Statements
)

func (k Kind) String() string {
	switch k {
	case Program:
		return "program"
	case Declarations:
		return "declarations"
	case Statements:
		return "statements"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Snippet is one Go block of a Markdown file.
type Snippet struct {
	File string // the Markdown file, as the test names it
	Line int    // line of the block's first line of code, from 1
	Code string
	// Output is the "output" block that follows the snippet, if any.
	Output    string
	HasOutput bool
}

// Extract returns the Go blocks of the Markdown text md, in order. file
// names it in the snippets.
func Extract(file string, md []byte) ([]Snippet, error) {
	var (
		out   []Snippet
		block *strings.Builder // the fenced block being read, or nil
		info  string           // its info string
		start int              // its first line of content
		// afterGo: the last block was Go and only blank lines followed
		// it since.
		afterGo bool
	)
	s := bufio.NewScanner(bytes.NewReader(md))
	s.Buffer(nil, 1<<20)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		trimmed := strings.TrimSpace(line)
		if block == nil {
			switch {
			case strings.HasPrefix(trimmed, "```"):
				info = strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
				block, start = &strings.Builder{}, n+1
			case trimmed != "" && !strings.HasSuffix(trimmed, ":"):
				// Prose ends the snippet's claim to the next output
				// block, unless it introduces it ("It prints:").
				afterGo = false
			}
			continue
		}
		if trimmed != "```" {
			block.WriteString(line + "\n")
			continue
		}
		switch {
		case info == "go" || strings.HasPrefix(info, "go "):
			out = append(out, Snippet{File: file, Line: start, Code: block.String()})
			afterGo = true
		case info == "output" && afterGo:
			last := &out[len(out)-1]
			last.Output, last.HasOutput = block.String(), true
			afterGo = false
		default:
			afterGo = false
		}
		block = nil
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if block != nil {
		return nil, fmt.Errorf("%s:%d: a fenced block is not closed", file, start-1)
	}
	return out, nil
}

// Kind tells how the snippet is compiled; see the package documentation.
func (s Snippet) Kind() Kind {
	fset := token.NewFileSet()
	if f, err := parser.ParseFile(fset, "", s.Code, parser.PackageClauseOnly); err == nil && f.Name != nil {
		return Program
	}
	if _, err := parser.ParseFile(fset, "", "package p\n"+s.Code, parser.SkipObjectResolution); err == nil {
		return Declarations
	}
	return Statements
}

// IsMain reports whether the snippet is a program of package main with a
// main function.
func (s Snippet) IsMain() bool {
	if s.Kind() != Program {
		return false
	}
	f, err := parser.ParseFile(token.NewFileSet(), "", s.Code, parser.SkipObjectResolution)
	if err != nil || f.Name.Name != "main" {
		return false
	}
	return slices.ContainsFunc(f.Decls, func(d ast.Decl) bool {
		fn, ok := d.(*ast.FuncDecl)
		return ok && fn.Recv == nil && fn.Name.Name == "main"
	})
}

// knownImports are the packages a snippet that is not a whole program may
// use, by the name it uses them by.
var knownImports = map[string]string{
	"bytes":      "bytes",
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"io":         "io",
	"log":        "log",
	"net":        "net",
	"http":       "net/http",
	"netip":      "net/netip",
	"os":         "os",
	"strings":    "strings",
	"sync":       "sync",
	"time":       "time",
	"sock":       "github.com/homa-go/homa/sock",
	"memnet":     "github.com/homa-go/homa/homa/memnet",
	"homa":       "github.com/homa-go/homa/homa",
	"netio":      "github.com/homa-go/homa/homa/netio",
	"metrics":    "github.com/homa-go/homa/metrics",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
}

// Source returns the Go file that compiles the snippet as package pkg:
// a whole program as it is, anything else wrapped and given its imports.
// A //line directive makes the compiler's messages name the Markdown
// file and its lines.
func (s Snippet) Source(pkg string) ([]byte, error) {
	directive := fmt.Sprintf("//line %s:%d\n", s.File, s.Line)
	var body string
	switch s.Kind() {
	case Program:
		return []byte(directive + s.Code), nil
	case Declarations:
		body = directive + s.Code
	default:
		body = "func _() {\n" + directive + s.Code + "}\n"
	}
	imports, err := usedImports("package " + pkg + "\n\n" + body)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: %w", s.File, s.Line, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// Code generated from %s:%d for the documentation's test. DO NOT EDIT.\n\n", s.File, s.Line)
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	if len(imports) > 0 {
		b.WriteString("import (\n")
		for _, path := range imports {
			fmt.Fprintf(&b, "\t%q\n", path)
		}
		b.WriteString(")\n\n")
	}
	b.WriteString(body)
	return []byte(b.String()), nil
}

// usedImports returns the import paths of the known packages that src
// refers to, sorted: every X of a selector X.Sel whose name is a known
// package's. (A snippet does not give a variable a package's name.)
func usedImports(src string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var paths []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok {
				if path, known := knownImports[x.Name]; known && !slices.Contains(paths, path) {
					paths = append(paths, path)
				}
			}
		}
		return true
	})
	slices.Sort(paths)
	return paths, nil
}

// Formatted reports whether the snippet's code is laid out as gofmt
// would lay it out.
func (s Snippet) Formatted() bool {
	out, err := format.Source([]byte(s.Code))
	return err == nil && string(out) == s.Code
}
