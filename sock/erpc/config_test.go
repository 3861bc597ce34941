package erpc_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/homa-go/homa/homa/memnet"
	"github.com/homa-go/homa/sock/erpc"
)

// TestConfigTableI: each inequality of the R2P2 report's table I, broken
// alone, is rejected by NewNexus with an error naming the field and the
// inequality; the defaults and a configuration at the edges pass.
func TestConfigTableI(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		eo    erpc.ExactlyOnceConfig
		field string // "" when valid
		rule  string
	}{
		{"defaults", erpc.ExactlyOnceConfig{}, "", ""},
		{"edges", erpc.ExactlyOnceConfig{RTT: 10 * ms, HandlerTime: 5 * ms, RetryTimeout: 16 * ms, MaxRetries: 3,
			RecordTimeout: 49 * ms, AckDelay: 38 * ms, PacketLifetime: 10 * ms}, "", ""},
		{"timeout A", erpc.ExactlyOnceConfig{RTT: 10 * ms, HandlerTime: 5 * ms, RetryTimeout: 15 * ms},
			"ExactlyOnce.RetryTimeout", "Timeout A > RTT + compute time"},
		{"N x timeout 1", erpc.ExactlyOnceConfig{RetryTimeout: 100 * ms, MaxRetries: 20, RecordTimeout: 2 * time.Second},
			"ExactlyOnce.RecordTimeout", "N x Timeout 1 > M x Timeout A"},
		{"timeout 1", erpc.ExactlyOnceConfig{RTT: 10 * ms, HandlerTime: 1 * ms, RetryTimeout: 20 * ms, MaxRetries: 1,
			RecordTimeout: 30 * ms, AckDelay: 20 * ms}, "ExactlyOnce.RecordTimeout", "Timeout 1 > RTT"},
		{"timeout 2", erpc.ExactlyOnceConfig{RTT: 50 * ms, PacketLifetime: 40 * ms},
			"ExactlyOnce.PacketLifetime", "Timeout 2"},
		{"negative", erpc.ExactlyOnceConfig{RetryTimeout: -1}, "ExactlyOnce.RetryTimeout", "negative"},
		{"too many retries", erpc.ExactlyOnceConfig{MaxRetries: 1 << 16}, "ExactlyOnce.MaxRetries", "at most"},
		{"record bytes", erpc.ExactlyOnceConfig{MaxRecordBytes: 999}, "ExactlyOnce.MaxRecordBytes", "at least one record in progress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := memnet.New(memnet.Config{})
			defer nw.Close()
			cfg := memConfig(nw)
			cfg.ExactlyOnce = tc.eo
			nx, err := erpc.NewNexus(netip.AddrPortFrom(serverHost, nexusPort), cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid configuration rejected: %v", err)
				}
				nx.Close()
				return
			}
			if err == nil {
				nx.Close()
				t.Fatal("invalid configuration accepted")
			}
			var ce *erpc.ConfigError
			if !errors.Is(err, erpc.ErrConfig) || !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError matching ErrConfig", err)
			}
			if ce.Field != tc.field || !strings.Contains(ce.Rule, tc.rule) {
				t.Fatalf("error names %q: %q; want %q with %q", ce.Field, ce.Rule, tc.field, tc.rule)
			}
		})
	}
}

// TestConfigBounds: the other limits are checked too.
func TestConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		cfg   erpc.Config
		field string
	}{
		{erpc.Config{SessionWindow: 257}, "SessionWindow"},
		{erpc.Config{SessionWindow: -1}, "SessionWindow"},
		{erpc.Config{MaxSessions: 1 << 25}, "MaxSessions"},
		{erpc.Config{BackgroundThreads: -1}, "BackgroundThreads"},
		{erpc.Config{RpcPortBase: 40000}, "RpcPortBase"},
		{erpc.Config{ConnectTimeout: -time.Second}, "ConnectTimeout"},
	} {
		nw := memnet.New(memnet.Config{})
		cfg := memConfig(nw)
		open := cfg.Open
		tc.cfg.Open = open
		_, err := erpc.NewNexus(netip.AddrPortFrom(serverHost, nexusPort), &tc.cfg)
		var ce *erpc.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: %v, want a ConfigError on %s", tc.cfg, err, tc.field)
		}
		nw.Close()
	}
}

// TestRegister: background handlers need workers; handlers are fixed once
// an Rpc exists; Rpc ids are unique.
func TestRegister(t *testing.T) {
	nw := memnet.New(memnet.Config{})
	defer nw.Close()
	nx, err := erpc.NewNexus(netip.AddrPortFrom(serverHost, nexusPort), memConfig(nw))
	if err != nil {
		t.Fatal(err)
	}
	defer nx.Close()
	if err := nx.Register(1, echo, erpc.Background); !errors.Is(err, erpc.ErrConfig) {
		t.Fatalf("background handler without workers: %v", err)
	}
	if err := nx.Register(1, echo, erpc.Dispatch); err != nil {
		t.Fatal(err)
	}
	r, err := nx.NewRpc(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.LocalAddr().Port() != nexusPort+1+3 {
		t.Fatalf("Rpc 3 on port %d, want %d", r.LocalAddr().Port(), nexusPort+1+3)
	}
	if err := nx.Register(2, echo, erpc.Dispatch); !errors.Is(err, erpc.ErrRegisterTooLate) {
		t.Fatalf("register after NewRpc: %v", err)
	}
	if _, err := nx.NewRpc(3, nil); !errors.Is(err, erpc.ErrRpcIDInUse) {
		t.Fatalf("second Rpc 3: %v", err)
	}
	// A taken port: the next Rpc id's natural port is skipped by 256.
	c, err := nw.Open(serverHost, nexusPort+1+4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r4, err := nx.NewRpc(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r4.Close()
	if r4.LocalAddr().Port() != nexusPort+1+4+256 {
		t.Fatalf("Rpc 4 on port %d, want %d", r4.LocalAddr().Port(), nexusPort+1+4+256)
	}
}
