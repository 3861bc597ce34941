package netio

// Linux test helpers for the external tests.
var (
	OpenRawT   = openRaw
	ReportOpts = reportOpts
)
