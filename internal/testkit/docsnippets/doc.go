// Package docsnippets keeps the Go snippets of the documentation honest:
// its test takes every Go block of README.md and of the Markdown files
// under docs/, compiles each one, and runs each one that is a whole
// program, comparing what it prints with the output shown for it.
//
// A snippet is a fenced block whose info string is "go". There are three
// kinds, told apart by how they start, and each must be correct Go as the
// reader sees it:
//
//   - A whole program: it starts with a package clause (comments may come
//     first). It is built as it is; if it is package main, it is run, as
//     the user running the test and, when that user is root and setpriv
//     is installed, once more as user nobody, so that a program that
//     needs privileges must say so and fall back. If a fenced block with
//     the info string "output" follows it (blank lines between are
//     allowed, and lines ending in a colon, such as "It prints:"), the
//     program's standard output must be exactly that block.
//   - Declarations: the block parses as the top-level declarations of a
//     file (funcs, types, vars, consts). They are compiled in a package of
//     their own.
//   - Statements: anything else is the body of a function with no
//     parameters and no results, and is compiled as one. It must declare
//     what it uses, like code pasted into an empty function would.
//
// Declarations and statements get the imports they use, found by the
// package names they refer to: the standard library's context, errors,
// fmt, io, log, net, http (net/http), netip (net/netip), os, strings, sync,
// time; this module's sock, homa, netio and metrics; prometheus and
// promhttp (client_golang). A snippet that needs another import must be a
// whole program.
//
// Compile errors point at the Markdown file and line (the generated files
// carry //line directives).
package docsnippets
