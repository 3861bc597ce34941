package dcsim

// tcpSeg is a baseline segment's header.
type tcpSeg struct{}
