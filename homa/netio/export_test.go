package netio

// Test helpers for the external tests (package netio_test), which run
// the Conn contract on the in-memory network of package memnet beside
// the socket Conns.
var (
	MakePackets    = makePackets
	WriteAll       = writeAll
	TestPacket     = testPacket
	TagOf          = tagOf
	OpenRandomPort = openRandomPort
	ReadInto       = readInto
	TestLanding    = testLanding
	PingPong       = pingPong
)

// LandLen is the Land the landing tests offer.
const LandLen = landLen
