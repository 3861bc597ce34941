package spec

import (
	"fmt"
	"slices"
	"strings"
)

// readme renders README.md from the catalogue.
func (c *catalogue) readme() []byte {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# The Homa draft's requirements, checked against the tests\n\n")
	p("<!-- Generated from %s by `go test ./spec -run TestCatalogue -update`. Do not edit. -->\n\n", catalogueFile)
	p("This directory catalogues every normative statement of the Homa Internet-Draft\n")
	p("(%s; the line numbers refer to the text with SHA-256 `%s`)\n", c.draftName, c.draftHash)
	p("and maps each to the tests of this repository that demonstrate it. A keyword\n")
	p("is normative only in capitals (BCP 14, as the draft's boilerplate says), so\n")
	p("lower-case \"must\" and \"should\" are not catalogued.\n\n")
	c.readmeFormat(&b)
	c.readmeCoverage(&b)
	c.readmeExceptions(&b)
	c.readmeEntries(&b)
	return []byte(b.String())
}

func (c *catalogue) readmeFormat(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Reading the catalogue\n\n")
	p("`%s` has one record per line, fields separated by `|`. An entry is\n\n", catalogueFile)
	p("    id | level | section | draft lines | paraphrase | tests [| note]\n\n")
	p("- **id**: `HOMA-<section>-<n>`, numbered in the draft's order within its section.\n")
	p("- **level**: the keyword (MUST, MUST NOT, SHOULD, SHOULD NOT, MAY, OPTIONAL).\n")
	p("  A sentence with several keywords gives several entries.\n")
	p("- **section** and **draft lines**: where the statement is; the lines are those\n")
	p("  that hold its keyword.\n")
	p("- **paraphrase**: the requirement in our own words.\n")
	p("- **tests**: the tests that demonstrate it, as `package/path.TestName` relative\n")
	p("  to the module root (`spec.TestX` are the conformance tests of this directory),\n")
	p("  or `not implemented: <reason>`, or `not applicable: <reason>`. A MUST or MUST\n")
	p("  NOT is always tested (by a failing test while the engine breaks it) unless it\n")
	p("  does not apply to an endpoint.\n")
	p("- **note**: how the engine meets it, and any limit to that.\n\n")
	p("The `section` records give each section's lines, the `occurs` records the\n")
	p("keywords on each line of the draft, and `mention` records the keywords that\n")
	p("state no requirement.\n\n")
	p("## Updating\n\n")
	p("Edit `%s`, then run\n\n", catalogueFile)
	p("    go test ./spec -run TestCatalogue -update   # rewrites this README\n")
	p("    go test ./spec\n\n")
	p("`TestCatalogue` fails if an entry is malformed or out of place, if an id\n")
	p("repeats, if a keyword occurrence of the draft has no entry, if a MUST or MUST\n")
	p("NOT has no test and is not marked not applicable, if a named test function\n")
	p("does not exist in its package, if a conformance test is named by no entry, or\n")
	p("if this README is out of date. When the draft text is found (the file named by\n")
	p("`$HOMA_DRAFT`, or a text file of the draft in %s), it also checks\n", strings.Join(quoted(draftDirs), " or "))
	p("the `occurs` records against the text and that no paraphrase or note repeats\n")
	p("%d consecutive words of it; if the text is a different version, it fails and\n", copiedWords)
	p("asks for the line numbers to be checked again.\n\n")
}

// tally counts a level's keyword occurrences and entries.
type tally struct {
	occurrences, mentioned                int
	entries, tested, notImpl, notApplicab int
}

func (c *catalogue) tallies() map[string]*tally {
	t := map[string]*tally{}
	get := func(level string) *tally {
		if t[level] == nil {
			t[level] = &tally{}
		}
		return t[level]
	}
	for line, kws := range c.occurs {
		for _, k := range kws {
			get(k).occurrences++
			if slices.ContainsFunc(c.mentions, func(m mention) bool {
				return slices.Contains(m.lines, line) && slices.Contains(m.keywords, k)
			}) {
				get(k).mentioned++
			}
		}
	}
	for _, e := range c.entries {
		x := get(e.level)
		x.entries++
		switch e.status {
		case statusTested:
			x.tested++
		case statusNotImplemented:
			x.notImpl++
		case statusNotApplicable:
			x.notApplicab++
		}
	}
	return t
}

func (c *catalogue) readmeCoverage(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Coverage\n\n")
	p("| level | in the draft | not requirements | entries | with tests | not implemented | not applicable |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var sum tally
	tallies := c.tallies()
	for _, level := range levels {
		x := tallies[level]
		if x == nil {
			continue
		}
		p("| %s | %d | %d | %d | %d | %d | %d |\n", level, x.occurrences, x.mentioned, x.entries, x.tested, x.notImpl, x.notApplicab)
		sum.occurrences += x.occurrences
		sum.mentioned += x.mentioned
		sum.entries += x.entries
		sum.tested += x.tested
		sum.notImpl += x.notImpl
		sum.notApplicab += x.notApplicab
	}
	p("| **total** | %d | %d | %d | %d | %d | %d |\n\n", sum.occurrences, sum.mentioned, sum.entries, sum.tested, sum.notImpl, sum.notApplicab)
	p("\"In the draft\" counts the keyword's occurrences; an entry may cover several\n")
	p("occurrences of its keyword that state one rule in one sentence.\n\n")
}

func (c *catalogue) readmeExceptions(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	for _, status := range []string{statusNotImplemented, statusNotApplicable} {
		p("## %s%s\n\n", strings.ToUpper(status[:1]), status[1:])
		n := 0
		for _, e := range c.entries {
			if e.status == status {
				p("- **%s** (%s, line %s): %s\n  Why: %s\n", e.id, e.level, joinInts(e.lines), e.text, e.reason)
				n++
			}
		}
		if n == 0 {
			p("None.\n")
		}
		p("\n")
	}
	p("## Keywords that state no requirement\n\n")
	for _, m := range c.mentions {
		p("- **%s** (%s, line %s): %s\n", m.id, strings.Join(m.keywords, ", "), joinInts(m.lines), m.why)
	}
	p("\n")
}

func (c *catalogue) readmeEntries(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## Sections\n\n")
	p("| section | title | entries |\n| --- | --- | ---: |\n")
	for _, s := range c.sections {
		n := 0
		for _, e := range c.entries {
			if e.section == s.num {
				n++
			}
		}
		if n > 0 {
			p("| %s | %s | %d |\n", s.num, s.title, n)
		}
	}
	p("\n## Entries\n\n")
	p("| id | level | section | line | requirement | demonstrated by |\n")
	p("| --- | --- | --- | --- | --- | --- |\n")
	for _, e := range c.entries {
		var how string
		if e.status == statusTested {
			how = strings.Join(quoted(e.tests), ", ")
		} else {
			how = fmt.Sprintf("*%s:* %s", e.status, e.reason)
		}
		if e.note != "" {
			how += "<br>*Note:* " + e.note
		}
		p("| %s | %s | %s | %s | %s | %s |\n", e.id, e.level, e.section, joinInts(e.lines), e.text, how)
	}
}

// quoted returns the strings as Markdown code spans.
func quoted(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = "`" + x + "`"
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
