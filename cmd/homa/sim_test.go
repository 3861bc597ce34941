package main

import (
	"context"
	"encoding/json"
	"testing"
)

// TestSimJSON: homa sim runs every protocol of --proto on one workload
// and prints the JSON fields.
func TestSimJSON(t *testing.T) {
	code, out, errOut := runHoma(context.Background(), "sim", "--workload", "w3", "--load", "0.5",
		"--duration", "1ms", "--hosts", "12", "--racks", "3", "--spines", "2", "--quiet", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v struct {
		Results []struct {
			Proto    string  `json:"proto"`
			Workload string  `json:"workload"`
			Messages int     `json:"messages"`
			Short99  float64 `json:"short_p99_slowdown"`
			Achieved float64 `json:"achieved_load"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var protos []string
	for _, r := range v.Results {
		protos = append(protos, r.Proto)
		if r.Workload != "w3" || r.Messages == 0 || r.Short99 < 1 || r.Achieved <= 0 {
			t.Errorf("%+v: want w3, messages, short p99 >= 1 and a load", r)
		}
	}
	if len(protos) != 3 || protos[0] != "homa" || protos[1] != "dctcp" || protos[2] != "srpt" {
		t.Errorf("protocols %v, want the default homa, dctcp, srpt", protos)
	}
}

func TestSimBadProto(t *testing.T) {
	if code, _, _ := runHoma(context.Background(), "sim", "--proto", "nope", "--quiet", "--duration", "1ms"); code == 0 {
		t.Error("an unknown protocol ran")
	}
}
