package stacks_test

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// FuzzLoad feeds arbitrary values to every top-level key. The stack
// front-end (stacks.Load and the components' own rules, program.Validate)
// must never panic, must tie every error to a key path, and whatever it
// accepts must be a config the components can use without further checks.
// `go test` runs the seed corpus; `make fuzz` explores further.
func FuzzLoad(f *testing.F) {
	for _, file := range []string{stackstest.ProxmoxExample, stackstest.VPSExample} {
		src := stackstest.Example(f, file)
		v := func(k string) string { return src.Values["talos-cluster:"+k] }
		f.Add(v("platform"), v("cluster"), v("nodes"), v("proxmox"), v("vps"))
	}
	f.Add("proxmox", `{"name":"x"}`, `{"controlPlanes":[{"name":"a","ip":"10.0.0.1","vmId":"100"}]}`, `{}`, `{}`)
	f.Add("vps", `{"network":{"gateway":"1.2.3.4"}}`, `{"controlPlanes":[{"ip":"1.2.3.4"},{"ip":"1.2.3.4"}]}`, `[]`, `null`)
	f.Add("", `{"patches":{"all":["machine: {instal: {}}", {"a": 1}]}}`, `{"workers":[null, 1, "x"]}`, `{"ssh":{"port":1e99}}`, `{"allowedCidrs":["::/0"]}`)
	f.Add("proxmox", `{"schematic":{"id":"`+strings.Repeat("f", 64)+`","extensions":[]}}`, `{}`, `{"endpoint":"https://[::1]:8006/"}`, `{}`)
	f.Add("proxmox", `{}`, `{"controlPlanes":[{"rescue":"pw123456"}]}`, `{"apiTokenId":"a@b!c=d1e2f3g4h5","apiTokenSecret":123456789,"ssh":{"hostKey":"-----BEGIN PRIVATE KEY----- abcdefgh","privateKey":"not a key 12345"}}`, `{}`)

	f.Fuzz(func(t *testing.T, platform, cluster, nodes, proxmox, vps string) {
		src := stacks.Source{Project: "talos-cluster", Values: map[string]string{
			"talos-cluster:platform": platform,
			"talos-cluster:cluster":  cluster,
			"talos-cluster:nodes":    nodes,
			"talos-cluster:proxmox":  proxmox,
			"talos-cluster:vps":      vps,
		}, SecretKeys: []string{"talos-cluster:nodes", "talos-cluster:proxmox"}}
		cfg, d := program.Validate(src)
		secrets := []stacks.Secret{cfg.Proxmox.APITokenSecret, cfg.Proxmox.SSH.PrivateKey}
		for _, n := range slices.Concat(cfg.Nodes.ControlPlanes, cfg.Nodes.Workers) {
			secrets = append(secrets, n.Rescue.Password)
		}
		for _, p := range append(d.Errors, d.Warnings...) {
			if p.Path == "" || p.Message == "" {
				t.Fatalf("problem without key path or message: %+v", p)
			}
			for _, s := range secrets {
				// Shorter ones are not scrubbed; "secret" is in "[secret]".
				if v := s.Reveal(); len(v) >= 6 && !strings.Contains("[secret]", v) && strings.Contains(p.Message, v) {
					t.Fatalf("a message shows a secret: %s", p)
				}
			}
		}
		if d.HasErrors() {
			if !strings.Contains(d.Err().Error(), d.Errors[0].Path) {
				t.Fatalf("error text lost the key path: %v", d.Err())
			}
			return
		}
		if cfg.Platform != stacks.PlatformProxmox && cfg.Platform != stacks.PlatformVPS {
			t.Fatalf("accepted platform %q", cfg.Platform)
		}
		if len(cfg.Nodes.ControlPlanes) == 0 {
			t.Fatal("accepted a cluster without control planes")
		}
		names := map[string]bool{}
		for _, n := range cfg.Nodes.All() {
			if _, err := netip.ParseAddr(n.IP); err != nil || names[n.Name] {
				t.Fatalf("accepted node %q with IP %q (duplicate name: %t)", n.Name, n.IP, names[n.Name])
			}
			names[n.Name] = true
			if cfg.Platform == stacks.PlatformVPS && !n.Rescue.Password.IsSet() {
				t.Fatalf("accepted VPS node %q without rescue password", n.Name)
			}
		}
		u, err := url.Parse(cfg.KubernetesEndpoint())
		if err != nil || u.Hostname() == "" || u.Port() != "6443" {
			t.Fatalf("accepted endpoint %q", cfg.KubernetesEndpoint())
		}
	})
}
