// Package erpc is an eRPC-style RPC layer over Homa sockets.
package erpc
