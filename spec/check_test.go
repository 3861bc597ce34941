package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// checkFormat checks every record on its own and against the sections
// and keyword occurrences: ids well formed, unique and numbered in order
// within their section; levels known; draft lines inside the section and
// holding the entry's keyword; paraphrases and notes short; test names
// well formed; every MUST or MUST NOT tested or not applicable.
func (c *catalogue) checkFormat() []error {
	var errs []error
	add := func(at int, format string, args ...any) { errs = append(errs, errAt(at, format, args...)) }

	secs := map[string]section{}
	for i, s := range c.sections {
		if _, dup := secs[s.num]; dup {
			errs = append(errs, fmt.Errorf("section %s listed twice", s.num))
		}
		secs[s.num] = s
		if i > 0 && s.first <= c.sections[i-1].last {
			errs = append(errs, fmt.Errorf("section %s (lines %d-%d) overlaps section %s", s.num, s.first, s.last, c.sections[i-1].num))
		}
	}

	seen := map[string]int{}  // id -> catalogue line
	count := map[string]int{} // section -> ids so far
	checkPlace := func(id, sec string, lines []int, at int) {
		if prev, dup := seen[id]; dup {
			add(at, "id %s already used on line %d", id, prev)
		}
		seen[id] = at
		m := idRE.FindStringSubmatch(id)
		switch {
		case m == nil:
			add(at, "id %q is not HOMA-<section>-<n>", id)
		case m[1] != sec:
			add(at, "id %s names section %s, the record says %s", id, m[1], sec)
		default:
			count[sec]++
			if n, _ := strconv.Atoi(m[2]); n != count[sec] {
				add(at, "id %s out of sequence: want HOMA-%s-%d", id, sec, count[sec])
			}
		}
		s, ok := secs[sec]
		if !ok {
			add(at, "%s: no section %s", id, sec)
			return
		}
		for _, l := range lines {
			if l < s.first || l > s.last {
				add(at, "%s: draft line %d is outside section %s (lines %d-%d)", id, l, sec, s.first, s.last)
			}
		}
	}

	for _, e := range c.entries {
		checkPlace(e.id, e.section, e.lines, e.at)
		if !slices.Contains(levels, e.level) {
			add(e.at, "%s: level %q is not a BCP 14 keyword", e.id, e.level)
		}
		for _, l := range e.lines {
			if !slices.Contains(c.occurs[l], e.level) {
				add(e.at, "%s: draft line %d holds no %s", e.id, l, e.level)
			}
		}
		if err := checkProse(e.text, maxParaphrase); err != nil {
			add(e.at, "%s: paraphrase %v", e.id, err)
		}
		if e.note != "" {
			if err := checkProse(e.note, maxNote); err != nil {
				add(e.at, "%s: note %v", e.id, err)
			}
		}
		for i, name := range e.tests {
			if !testRE.MatchString(name) {
				add(e.at, "%s: %q is not package/path.TestName", e.id, name)
			}
			if slices.Contains(e.tests[:i], name) {
				add(e.at, "%s: %s named twice", e.id, name)
			}
		}
		if mandatory(e.level) && e.status == statusNotImplemented {
			add(e.at, "%s: a %s must be tested (failing, if the engine breaks it) or be not applicable", e.id, e.level)
		}
	}

	for _, m := range c.mentions {
		checkPlace(m.id, m.section, m.lines, m.at)
		for _, k := range m.keywords {
			if !slices.ContainsFunc(m.lines, func(l int) bool { return slices.Contains(c.occurs[l], k) }) {
				add(m.at, "%s: %s is on none of its lines", m.id, k)
			}
		}
		if err := checkProse(m.why, maxNote); err != nil {
			add(m.at, "%s: explanation %v", m.id, err)
		}
	}
	return errs
}

// checkProse checks a paraphrase or note: a sentence of at most max
// bytes, starting with a capital and ending with a full stop.
func checkProse(s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("is empty")
	case len(s) > max:
		return fmt.Errorf("is %d bytes, over %d", len(s), max)
	case !unicode.IsUpper([]rune(s)[0]) && !unicode.IsDigit([]rune(s)[0]):
		return fmt.Errorf("%q does not start with a capital", s)
	case !strings.HasSuffix(s, "."):
		return fmt.Errorf("%q does not end with a full stop", s)
	}
	return nil
}

// checkCoverage checks that every keyword occurrence of the draft is
// covered: by at least one entry of that level on that line, and by no
// more entries than the line has occurrences of the keyword; or else by a
// mention.
func (c *catalogue) checkCoverage() []error {
	var errs []error
	for _, line := range slices.Sorted(maps.Keys(c.occurs)) {
		n := map[string]int{}
		for _, k := range c.occurs[line] {
			n[k]++
		}
		for _, k := range slices.Sorted(maps.Keys(n)) {
			var claimed []string
			for _, e := range c.entries {
				if e.level == k && slices.Contains(e.lines, line) {
					claimed = append(claimed, e.id)
				}
			}
			mentioned := slices.ContainsFunc(c.mentions, func(m mention) bool {
				return slices.Contains(m.lines, line) && slices.Contains(m.keywords, k)
			})
			switch {
			case mentioned && len(claimed) > 0:
				errs = append(errs, fmt.Errorf("draft line %d: %s is both a mention and entries %v", line, k, claimed))
			case mentioned:
			case len(claimed) == 0:
				errs = append(errs, fmt.Errorf("draft line %d: %s (%d×) is covered by no entry", line, k, n[k]))
			case len(claimed) > n[k]:
				errs = append(errs, fmt.Errorf("draft line %d: entries %v claim %d %s, the line has %d", line, claimed, len(claimed), k, n[k]))
			}
		}
	}
	return errs
}

// testFuncRE finds the test functions of a Go file.
var testFuncRE = regexp.MustCompile(`(?m)^func (Test\w*)\(`)

// testFuncs returns the names of the test functions in the *_test.go
// files of dir.
func testFuncs(dir string) (map[string]bool, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no test files in %s", dir)
	}
	names := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for _, m := range testFuncRE.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
	}
	return names, nil
}

// checkTests checks that every test an entry names exists in its package
// directory under root, and that every test of this package other than
// TestCatalogue is named by some entry.
func (c *catalogue) checkTests(root string) []error {
	var errs []error
	dirs := map[string]map[string]bool{}
	named := map[string]bool{} // tests of package spec that entries name
	for _, e := range c.entries {
		for _, name := range e.tests {
			m := testRE.FindStringSubmatch(name)
			if m == nil {
				continue // reported by checkFormat
			}
			pkg, fn := m[1], m[2]
			if pkg == "spec" {
				named[fn] = true
			}
			funcs, ok := dirs[pkg]
			if !ok {
				var err error
				if funcs, err = testFuncs(filepath.Join(root, filepath.FromSlash(pkg))); err != nil {
					errs = append(errs, errAt(e.at, "%s: %v", e.id, err))
				}
				dirs[pkg] = funcs
			}
			if funcs != nil && !funcs[fn] {
				errs = append(errs, errAt(e.at, "%s: no func %s in %s/*_test.go", e.id, fn, pkg))
			}
		}
	}
	own, err := testFuncs(".")
	if err != nil {
		return append(errs, err)
	}
	for _, fn := range slices.Sorted(maps.Keys(own)) {
		if fn != "TestCatalogue" && !named[fn] {
			errs = append(errs, fmt.Errorf("spec.%s is named by no entry", fn))
		}
	}
	return errs
}

// draftDirs are where TestCatalogue looks for the draft text when
// HOMA_DRAFT is not set: the project's shared reference texts beside the
// module, and this package's testdata.
var draftDirs = []string{
	filepath.Join(moduleRoot, "..", "shared", "seeds"),
	"testdata",
}

// findDraft returns the path and text of the draft: the file HOMA_DRAFT
// names, or else the text file in draftDirs that is the draft, preferring
// the version the catalogue was written against. It returns a nil text
// when there is none.
func findDraft(hash string) (string, []byte, error) {
	if p := os.Getenv("HOMA_DRAFT"); p != "" {
		b, err := os.ReadFile(p)
		return p, b, err
	}
	var path string
	var text []byte
	for _, dir := range draftDirs {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil || !strings.Contains(string(b), draftDocname) {
				continue
			}
			if sha(b) == hash {
				return p, b, nil
			}
			if text == nil {
				path, text = p, b
			}
		}
	}
	return path, text, nil
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// scanKeywords returns the BCP 14 keywords on each line of text
// (numbered from 1), in order.
func scanKeywords(text []byte) map[int][]string {
	occ := map[int][]string{}
	for i, line := range strings.Split(string(text), "\n") {
		if m := keywordRE.FindAllString(line, -1); len(m) > 0 {
			occ[i+1] = m
		}
	}
	return occ
}

// checkDraft checks the catalogue against the draft text: the text is the
// version the catalogue records, its keywords are where the occurs
// records say, and no paraphrase, note or explanation repeats a run of
// copiedWords words of it.
func (c *catalogue) checkDraft(path string, text []byte) []error {
	var errs []error
	if h := sha(text); h != c.draftHash {
		errs = append(errs, fmt.Errorf("%s has SHA-256 %s, the catalogue was written against %s: "+
			"the draft changed, so re-check every entry's line numbers, then update the draft and occurs records", path, h, c.draftHash))
	}
	occ := scanKeywords(text)
	lines := slices.Sorted(maps.Keys(occ))
	for l := range c.occurs {
		if _, ok := occ[l]; !ok {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		if !slices.Equal(occ[l], c.occurs[l]) {
			errs = append(errs, fmt.Errorf("draft line %d holds %v, the occurs records say %v", l, occ[l], c.occurs[l]))
		}
	}

	shingles := map[string]bool{}
	w := words(string(text))
	for i := 0; i+copiedWords <= len(w); i++ {
		shingles[strings.Join(w[i:i+copiedWords], " ")] = true
	}
	copied := func(id, what, s string, at int) {
		w := words(s)
		for i := 0; i+copiedWords <= len(w); i++ {
			if run := strings.Join(w[i:i+copiedWords], " "); shingles[run] {
				errs = append(errs, errAt(at, "%s: the %s repeats the draft's words %q: say it in other words", id, what, run))
				return
			}
		}
	}
	for _, e := range c.entries {
		copied(e.id, "paraphrase", e.text, e.at)
		copied(e.id, "note", e.note, e.at)
		copied(e.id, "reason", e.reason, e.at)
	}
	for _, m := range c.mentions {
		copied(m.id, "explanation", m.why, m.at)
	}
	return errs
}

// words splits s into lower-case words of letters and digits.
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}
