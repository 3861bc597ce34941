package spec

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md from requirements.txt")

const (
	catalogueFile = "requirements.txt"
	readmeFile    = "README.md"
	// moduleRoot is the module's root directory, relative to this package.
	moduleRoot = ".."
	// draftDocname identifies the draft's text among candidate files.
	draftDocname = "docname: draft-ousterhout-tsvwg-homa"
	// maxParaphrase and maxNote bound the length of an entry's fields, in
	// bytes: a paraphrase is one sentence.
	maxParaphrase = 200
	maxNote       = 400
	// copiedWords is the length of a run of words that a paraphrase or
	// note may not share with the draft.
	copiedWords = 8
)

// levels are the BCP 14 keywords (RFC 2119, RFC 8174), in the order the
// README lists them.
var levels = []string{
	"MUST", "MUST NOT", "REQUIRED", "SHALL", "SHALL NOT",
	"SHOULD", "SHOULD NOT", "RECOMMENDED", "NOT RECOMMENDED",
	"MAY", "OPTIONAL",
}

// mandatory reports whether a level is an absolute requirement or
// prohibition: one that only "not applicable" may excuse from a test.
func mandatory(level string) bool {
	switch level {
	case "MUST", "MUST NOT", "REQUIRED", "SHALL", "SHALL NOT":
		return true
	}
	return false
}

// keywordRE finds BCP 14 keywords in the draft. Longer forms come first:
// Go's regexp takes the first alternative that matches at a position.
var keywordRE = regexp.MustCompile(`\b(MUST NOT|MUST|SHALL NOT|SHALL|SHOULD NOT|SHOULD|NOT RECOMMENDED|RECOMMENDED|REQUIRED|MAY|OPTIONAL)\b`)

// Entry statuses.
const (
	statusTested         = "tested"
	statusNotImplemented = "not implemented"
	statusNotApplicable  = "not applicable"
)

// section is a numbered section of the draft and the lines it spans
// (up to its first subsection, if it has any).
type section struct {
	num         string
	first, last int
	title       string
}

// entry is one normative statement of the draft.
type entry struct {
	id, level, section string
	lines              []int  // draft lines holding the statement's keyword
	text               string // the paraphrase
	status             string
	tests              []string // when tested
	reason             string   // when not implemented or not applicable
	note               string
	at                 int // line in the catalogue file
}

// mention is an occurrence of keywords in the draft that states no
// requirement.
type mention struct {
	id, section string
	lines       []int
	keywords    []string
	why         string
	at          int
}

// catalogue is the parsed requirements.txt.
type catalogue struct {
	draftName, draftHash string
	sections             []section
	occurs               map[int][]string // draft line -> keywords on it, in order
	entries              []entry
	mentions             []mention
}

// lineError is a problem on a line of the catalogue file.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("%s:%d: %s", catalogueFile, e.line, e.msg) }

func errAt(line int, format string, args ...any) error {
	return &lineError{line, fmt.Sprintf(format, args...)}
}

var (
	idRE   = regexp.MustCompile(`^HOMA-(\d+(?:\.\d+)*)-([1-9]\d*)$`)
	testRE = regexp.MustCompile(`^([a-z0-9_]+(?:/[a-z0-9_]+)*)\.(Test[A-Za-z0-9_]*)(/\S+)?$`)
)

// parseCatalogue reads the catalogue, returning every problem it finds.
func parseCatalogue(r io.Reader) (*catalogue, []error) {
	c := &catalogue{occurs: map[int][]string{}}
	var errs []error
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "|")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		var err error
		switch {
		case f[0] == "draft":
			err = c.parseDraft(f)
		case f[0] == "section":
			err = c.parseSection(f)
		case f[0] == "occurs":
			err = c.parseOccurs(f)
		case f[0] == "mention":
			err = c.parseMention(f, n)
		case strings.HasPrefix(f[0], "HOMA-"):
			err = c.parseEntry(f, n)
		default:
			err = fmt.Errorf("unknown record %q", f[0])
		}
		if err != nil {
			errs = append(errs, errAt(n, "%v", err))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if c.draftHash == "" {
		errs = append(errs, errors.New("no draft record"))
	}
	return c, errs
}

func fields(f []string, n int) error {
	if len(f) != n {
		return fmt.Errorf("%s record has %d fields, want %d", f[0], len(f), n)
	}
	for i, s := range f {
		if s == "" {
			return fmt.Errorf("%s record: field %d is empty", f[0], i+1)
		}
	}
	return nil
}

func (c *catalogue) parseDraft(f []string) error {
	if err := fields(f, 3); err != nil {
		return err
	}
	if c.draftHash != "" {
		return errors.New("second draft record")
	}
	if b, err := hex.DecodeString(f[2]); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("draft hash %q is not a SHA-256", f[2])
	}
	c.draftName, c.draftHash = f[1], f[2]
	return nil
}

func (c *catalogue) parseSection(f []string) error {
	if err := fields(f, 4); err != nil {
		return err
	}
	first, last, ok := strings.Cut(f[2], "-")
	a, err1 := strconv.Atoi(first)
	b, err2 := strconv.Atoi(last)
	if !ok || err1 != nil || err2 != nil || a < 1 || b < a {
		return fmt.Errorf("section %s: bad line range %q", f[1], f[2])
	}
	c.sections = append(c.sections, section{num: f[1], first: a, last: b, title: f[3]})
	return nil
}

func (c *catalogue) parseOccurs(f []string) error {
	if err := fields(f, 3); err != nil {
		return err
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n < 1 {
		return fmt.Errorf("bad line number %q", f[1])
	}
	if _, dup := c.occurs[n]; dup {
		return fmt.Errorf("line %d listed twice", n)
	}
	kws, err := keywordList(f[2])
	if err != nil {
		return err
	}
	c.occurs[n] = kws
	return nil
}

// keywordList parses a comma-separated list of BCP 14 keywords.
func keywordList(s string) ([]string, error) {
	var kws []string
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(levels, k) {
			return nil, fmt.Errorf("%q is not a BCP 14 keyword", k)
		}
		kws = append(kws, k)
	}
	return kws, nil
}

// lineList parses a comma-separated list of draft line numbers.
func lineList(s string) ([]int, error) {
	var lines []int
	for x := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad draft line %q", x)
		}
		if slices.Contains(lines, n) {
			return nil, fmt.Errorf("draft line %d listed twice", n)
		}
		lines = append(lines, n)
	}
	return lines, nil
}

func (c *catalogue) parseMention(f []string, at int) error {
	if err := fields(f, 6); err != nil {
		return err
	}
	lines, err := lineList(f[3])
	if err != nil {
		return err
	}
	kws, err := keywordList(f[4])
	if err != nil {
		return err
	}
	c.mentions = append(c.mentions, mention{id: f[1], section: f[2], lines: lines, keywords: kws, why: f[5], at: at})
	return nil
}

func (c *catalogue) parseEntry(f []string, at int) error {
	var note string
	if len(f) == 7 {
		note, f = f[6], f[:6]
		if note == "" {
			return errors.New("empty note: drop the last separator")
		}
	}
	if err := fields(f, 6); err != nil {
		return err
	}
	e := entry{id: f[0], level: f[1], section: f[2], text: f[4], note: note, at: at}
	var err error
	if e.lines, err = lineList(f[3]); err != nil {
		return err
	}
	switch t := f[5]; {
	case strings.HasPrefix(t, statusNotImplemented+":"):
		e.status, e.reason = statusNotImplemented, strings.TrimSpace(strings.TrimPrefix(t, statusNotImplemented+":"))
	case strings.HasPrefix(t, statusNotApplicable+":"):
		e.status, e.reason = statusNotApplicable, strings.TrimSpace(strings.TrimPrefix(t, statusNotApplicable+":"))
	default:
		e.status = statusTested
		for name := range strings.SplitSeq(t, ",") {
			e.tests = append(e.tests, strings.TrimSpace(name))
		}
	}
	if e.status != statusTested && e.reason == "" {
		return fmt.Errorf("%s: %s without a reason", e.id, e.status)
	}
	c.entries = append(c.entries, e)
	return nil
}

// TestCatalogue checks requirements.txt (see the package documentation)
// and that README.md is what it generates; with -update it rewrites
// README.md instead.
func TestCatalogue(t *testing.T) {
	f, err := os.Open(catalogueFile)
	if err != nil {
		t.Fatal(err)
	}
	c, errs := parseCatalogue(f)
	f.Close()
	if report(t, errs) {
		t.FailNow()
	}
	t.Run("format", func(t *testing.T) { report(t, c.checkFormat()) })
	t.Run("coverage", func(t *testing.T) { report(t, c.checkCoverage()) })
	t.Run("tests", func(t *testing.T) { report(t, c.checkTests(moduleRoot)) })
	t.Run("draft", func(t *testing.T) {
		path, text, err := findDraft(c.draftHash)
		if err != nil {
			t.Fatal(err)
		}
		if text == nil {
			t.Skip("the draft's text was not found: the occurs records and the paraphrases are not checked against it; " +
				"to check them, save draft-ousterhout-tsvwg-homa as text (datatracker.ietf.org) in spec/testdata, or set HOMA_DRAFT to its path")
		}
		report(t, c.checkDraft(path, text))
	})
	t.Run("readme", func(t *testing.T) {
		want := c.readme()
		if *update {
			if err := os.WriteFile(readmeFile, want, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		got, err := os.ReadFile(readmeFile)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what %s generates (%v): run go test ./spec -run TestCatalogue -update", readmeFile, catalogueFile, err)
		}
	})
}

// report reports every error and says whether there were any.
func report(t *testing.T, errs []error) bool {
	t.Helper()
	for _, err := range errs {
		t.Error(err)
	}
	return len(errs) > 0
}
