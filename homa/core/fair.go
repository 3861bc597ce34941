package core

// Fairness among the client ports of one host. A host's shares of the
// incoming requests and of receive memory (Limits.IncomingRPCsPerPeer,
// RecvMemoryPerPeer) are what all its client ports hold together, so
// that a host gains nothing by opening more ports. Within the share, a
// port holding more than another that needs room gives way: when the
// share is spent and no idle request of the host can be shed, the least
// recently active request of the port holding the most is shed, moving
// or not, as long as that port still holds more than the newcomer's
// would with its request. Ports of a host thus converge to equal parts
// of its share, and one port's requests, however busy, cannot lock its
// neighbours out.

// portUse is what one client port of a host holds: its server RPCs,
// those whose request is arriving, and their receive storage.
type portUse struct {
	rpcs, incoming, mem int
}

// useOf returns the account of p's client port port, making it if new,
// and counts one more server RPC in it. The account of the port last
// asked for is at hand without a lookup.
func (p *peer) useOf(port uint16) *portUse {
	u := p.lastUse
	if u == nil || p.lastPort != port {
		u = p.ports[port]
		if u == nil {
			if p.ports == nil {
				p.ports = make(map[uint16]*portUse)
			}
			u = &portUse{}
			p.ports[port] = u
		}
		p.lastPort, p.lastUse = port, u
	}
	u.rpcs++
	return u
}

// keptPorts is how many accounts with no RPC a host keeps: a port's
// next RPC then finds its account, with no allocation, while a host
// with more ports than this gets its idle ones forgotten.
const keptPorts = 16

// releaseUse uncounts server RPC r from its port's account, forgetting
// the account with its last RPC when the host has many.
func (c *Core) releaseUse(r *rpc) {
	u := r.use
	if u == nil {
		return
	}
	r.use = nil
	if u.rpcs--; u.rpcs == 0 && len(r.peer.ports) > keptPorts {
		delete(r.peer.ports, r.port)
		if r.peer.lastUse == u {
			r.peer.lastUse = nil
		}
	}
}

func incomingOf(u *portUse) int { return u.incoming }
func memOf(u *portUse) int      { return u.mem }

// shedForPort makes room for need more of a resource (measured by of)
// for the port of account u (nil: a port with nothing yet) at p, whose
// share is spent: it frees the least recently active request of the
// port of p holding the most, if that port holds more than u would with
// need more. It reports whether it freed one.
func (c *Core) shedForPort(p *peer, u *portUse, need int, of func(*portUse) int) bool {
	var hog *portUse
	for _, v := range p.ports {
		if hog == nil || of(v) > of(hog) {
			hog = v
		}
	}
	have := 0
	if u != nil {
		have = of(u)
	}
	if hog == nil || hog == u || of(hog) <= have+need {
		return false
	}
	for v := p.receivingServers.Front(); v != nil; v = p.receivingServers.Next(v) {
		if v.use == hog && of(hog) > 0 && (need == 1 || v.in.mem > 0) {
			c.stats.Shed++
			c.freeServer(v, false)
			return true
		}
	}
	return false
}
