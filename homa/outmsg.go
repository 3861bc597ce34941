package homa

// outMsg is an outgoing message: the bytes, what has been sent, and what
// the receiver allows to be sent.
type outMsg struct {
	data      []byte // owned copy of the message
	length    uint32
	unsched   uint32 // bytes sent without grants (the DATA "incoming" field)
	next      uint32 // every byte below has been sent once
	granted   uint32 // the sender may send bytes below this offset
	schedPrio uint8  // priority for granted bytes, from the last GRANT
}

func (m *outMsg) init(data []byte, unsched int) {
	m.data = data
	m.length = uint32(len(data))
	m.unsched = min(uint32(unsched), m.length)
	m.next = 0
	m.granted = m.unsched
	m.schedPrio = 0
}

// done reports whether every byte has been sent at least once.
func (m *outMsg) done() bool { return m.next >= m.length }

// grant raises the granted offset (never above the length) and reports
// whether it moved.
func (m *outMsg) grant(offset uint32, prio uint8) bool {
	m.schedPrio = prio
	offset = min(offset, m.length)
	if offset <= m.granted {
		return false
	}
	m.granted = offset
	return true
}

func (m *outMsg) release() {
	if m.data != nil {
		putBuf(m.data)
		m.data = nil
	}
}
