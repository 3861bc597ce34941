//go:build !linux

package hcap

import "github.com/homa-go/homa/internal/capture/pcapfile"

// Live captures the frames of one network interface. It is only
// available on Linux.
type Live struct{}

// OpenLive reports ErrUnsupported: live capture needs Linux's AF_PACKET
// sockets.
func OpenLive(iface string) (*Live, error) { return nil, ErrUnsupported }

// LinkType is the link-layer type of the frames Next returns.
func (l *Live) LinkType() pcapfile.LinkType { return 0 }

// Next reports ErrUnsupported.
func (l *Live) Next() (pcapfile.Record, error) { return pcapfile.Record{}, ErrUnsupported }

// Close does nothing.
func (l *Live) Close() error { return nil }
