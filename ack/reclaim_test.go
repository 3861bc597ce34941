package ack_test

import (
	"testing"

	"github.com/homa-go/homa/ack"
	"github.com/homa-go/homa/resend"
)

// TestDefaultReclaimOutlastsClientTimeout checks the inequality between
// the two packages' defaults. Only this test imports resend; package ack
// itself does not.
func TestDefaultReclaimOutlastsClientTimeout(t *testing.T) {
	reclaim := ack.Config{}.WithDefaults().ReclaimTicks
	need := ack.ReclaimAtLeast(resend.Config{}.TimeoutTicks())
	if reclaim < need {
		t.Errorf("default ReclaimTicks %d < ReclaimAtLeast(client timeout) = %d", reclaim, need)
	}
}
