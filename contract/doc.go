// Package contract is what both Homa backends speak, so that package
// sock can put either under one Socket: the Message an application
// receives, the errors of sockets and RPCs, the limits of messages and
// ports, the resource limits a socket enforces, and the statistics it
// reports.
//
// The user-space engine (package homa and its protocol core) and the
// kernel module backend (package khoma) import this package and never
// each other. Applications use it through package sock, which aliases
// each of its names once.
package contract
