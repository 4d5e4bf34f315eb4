package stacks

import (
	"fmt"
	"strings"

	"filippo.io/age"
)

// validateGitOps checks what only the stack file sees of the gitops
// section and the load balancer pools: the secrets' text (the component
// gets them as secret outputs, unknown until the run) and the selectors'
// values. The rest of both is the TalosCluster's (rules:"component").
func validateGitOps(d *Diagnostics, cfg *Config) {
	g := cfg.GitOps
	if key := g.SopsAgeKey.Reveal(); key != "" {
		ids, err := age.ParseIdentities(strings.NewReader(key))
		switch {
		case err != nil:
			d.errorf("gitops.sopsAgeKey", "is not an age identity file (AGE-SECRET-KEY-1... lines, as age-keygen writes keys.txt): %v", redactAgeError(err))
		default:
			for _, id := range ids {
				if _, ok := id.(*age.X25519Identity); !ok {
					d.errorf("gitops.sopsAgeKey", "holds an identity SOPS cannot use: only X25519 keys (AGE-SECRET-KEY-1...)")
				}
			}
		}
	}
	if k := g.Repository.SSHPrivateKey.Reveal(); k != "" && !strings.Contains(k, "PRIVATE KEY-----") {
		d.errorf("gitops.repository.sshPrivateKey", "is not a private key in PEM or OpenSSH form (-----BEGIN ... PRIVATE KEY-----)")
	}
	for i, p := range cfg.Cluster.LoadBalancer.Pools {
		for k, v := range p.ServiceSelector {
			if _, ok := v.(string); !ok {
				d.errorf(fmt.Sprintf("cluster.loadBalancer.pools[%d].serviceSelector.%s", i, k), "must be a string (a label value; quote it in YAML)")
			}
		}
	}
}

// redactAgeError keeps a parse error of an identity file from quoting the
// key: age's errors name the line number, not its text, but a future
// version might; only the first clause is kept.
func redactAgeError(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "AGE-SECRET-KEY"); i >= 0 {
		msg = msg[:i] + "[redacted]"
	}
	return msg
}
