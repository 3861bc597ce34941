// Package spec holds the catalogue of the Homa Internet-Draft's normative
// statements (draft-ousterhout-tsvwg-homa) and the tests that check the
// implementation against it. It has no code of its own: importing it does
// nothing.
//
// The catalogue is requirements.txt. Each entry is one MUST, MUST NOT,
// SHOULD, SHOULD NOT, MAY or OPTIONAL of the draft, with its section and
// line numbers in the draft text, a paraphrase, and the tests that
// demonstrate it (named as package-path.TestName, relative to the module
// root), or the reason it is not implemented or does not apply to an
// endpoint. README.md, generated from the catalogue, explains the format
// and shows the coverage.
//
// The package's tests come in two kinds:
//
//   - TestCatalogue (catalogue_test.go) parses the catalogue and fails if
//     an entry is malformed, an id repeats, a keyword of the draft is left
//     without an entry, a MUST or MUST NOT has no test (only "not
//     applicable" may excuse it), or a named test does not exist. When the
//     draft text is at hand it also checks the catalogue's record of where
//     the keywords are, and that no paraphrase copies the draft. It
//     rewrites README.md when run with -update:
//
//     go test ./spec -run TestCatalogue -update
//
//   - The conformance tests (conformance_test.go) demonstrate requirements
//     that no test of the engine's own packages shows directly. They drive
//     homa.Endpoint on the in-memory network, inject packets built with
//     homa/wire, and read what the endpoint sends from a tap on its Conn.
package spec
