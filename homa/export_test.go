package homa

import "time"

var fixedTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
