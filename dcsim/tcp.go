package dcsim

// tcpSeg is a baseline segment's header.
type tcpSeg struct{}

func tcpPacketizer(cfg *Config) packetizer {
	return packetizer{payload: cfg.MTU - 40, overhead: 40 + cfg.FrameOverhead}
}

type tcpNet struct{ homaNet }

func newTCPNet(f *fabric, cfg *Config) *tcpNet { return &tcpNet{*newHomaNet(f, cfg)} }
