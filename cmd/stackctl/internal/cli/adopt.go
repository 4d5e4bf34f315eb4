package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/access"
	"github.com/fluodata/talos-pulumi/stacks"
)

// adoptCmd records a running cluster's secrets (and its bootstrap) in a
// stack with `pulumi import`, after checking the files, so that the next
// `up` takes the cluster over instead of making a new one. With --release
// it imports Helm releases the playbooks installed, once an `up` has made
// the cluster's Kubernetes provider.
func adoptCmd(ctx context.Context, args []string, e accessEnv) int {
	fs := flag.NewFlagSet("adopt", flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	stack := fs.String("stack", os.Getenv("STACK"), "stack name (default: $STACK)")
	secretsFile := fs.String("secrets", "", "the cluster's secrets.yaml (talosctl gen secrets; the Ansible environment folder's)")
	talosconfig := fs.String("talosconfig", "", "talosconfig to cross-check the secrets with (default: the one next to the secrets file, if any)")
	newCluster := fs.Bool("new-cluster", false, "reuse the secrets for a cluster not bootstrapped yet (by default the bootstrap is recorded as done)")
	dryRun := fs.Bool("dry-run", false, "check and print the import file, do not run pulumi import")
	yes := fs.Bool("yes", false, "pass --yes to pulumi import (no confirmation prompt)")
	var releases []string
	fs.Func("release", "import this Helm release already in the cluster (cilium, kubelet-csr-approver; repeatable), after an up made the Kubernetes provider", func(v string) error {
		releases = append(releases, v)
		return nil
	})
	pulumiPath := fs.String("pulumi", "pulumi", "path of the pulumi CLI")
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if *stack == "" || (*secretsFile == "") == (len(releases) == 0) || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(e.Stderr, `usage: stackctl adopt --stack NAME --secrets path/to/secrets.yaml [--talosconfig FILE] [--new-cluster] [--dry-run] [--yes]
       stackctl adopt --stack NAME --release cilium [--release ...] [--dry-run] [--yes]   (after the first up)`)
		return exitcode.Usage
	}
	if e.ReadConfig == nil {
		e.ReadConfig = func(ctx context.Context, stack string) ([]byte, error) {
			return readConfigJSON(ctx, *pulumiPath, "", stack, nil)
		}
	}
	fail := func(code int, format string, a ...any) int {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: "+format+"\nNothing was imported.\n", a...)
		return code
	}

	cfg, project, err := loadStack(ctx, e.ReadConfig, *stack)
	if err != nil {
		return fail(exitcode.BadConfig, "stack %s: %v", *stack, err)
	}
	if len(releases) > 0 {
		nameTable, rs, err := adopt.ReleasesPlan(cfg, *stack, project, releases)
		if err != nil {
			return fail(exitcode.Usage, "%v", err)
		}
		// The provider reads the releases from the cluster's API server.
		if access.Enabled(cfg) && !*dryRun {
			s, err := startForCommand(ctx, cfg, e.Start, access.Options{}, e.Stderr)
			if err != nil {
				return fail(exitcode.Failed, "proxmox.access is %s: %v", stacks.AccessSSHProxy, err)
			}
			defer func() { _ = s.Close() }()
			e.Environ = s.Environ(e.Environ)
		}
		code := runImport(map[string]any{"nameTable": nameTable, "resources": rs}, *pulumiPath, *stack, *dryRun, *yes, e)
		if code == exitcode.OK && !*dryRun {
			_, _ = fmt.Fprintf(e.Stderr, "\nImported. Next: make preview STACK=%s shows each release as an update (helm upgrade to the stack's chart version and values), not a replace.\n", *stack)
		}
		return code
	}
	bundle, err := adopt.LoadSecrets(*secretsFile)
	if err != nil {
		return fail(exitcode.Failed, "%v", err)
	}
	tc := *talosconfig
	if tc == "" {
		tc = adopt.SiblingTalosconfig(*secretsFile)
	}
	if tc == "" {
		_, _ = fmt.Fprintf(e.Stderr, "note: no talosconfig next to %s; pass --talosconfig to check that the secrets are the running cluster's\n", *secretsFile)
	} else {
		warnings, err := adopt.CheckTalosconfig(cfg, bundle, tc)
		if err != nil {
			return fail(exitcode.Failed, "%v", err)
		}
		for _, w := range warnings {
			_, _ = fmt.Fprintf(e.Stderr, "warning: %s\n", w)
		}
		_, _ = fmt.Fprintf(e.Stderr, "%s and %s belong to the same cluster (same Talos CA)\n", *secretsFile, tc)
	}

	rs, err := adopt.Plan(cfg, adopt.PlanOptions{SecretsFile: *secretsFile, Bootstrapped: !*newCluster})
	if err != nil {
		return fail(exitcode.Failed, "%v", err)
	}
	// The import file holds only the secrets file's path, not its content.
	code := runImport(map[string]any{"resources": rs}, *pulumiPath, *stack, *dryRun, *yes, e)
	if code != exitcode.OK || *dryRun {
		return code
	}
	_, _ = fmt.Fprint(e.Stderr, nextSteps(cfg, *stack, adopt.ImportedTalosVersion(bundle), !*newCluster))
	return exitcode.OK
}

// runImport writes the import file (private, removed afterwards) and runs
// pulumi import on it, or prints it for a dry run.
func runImport(file map[string]any, pulumiPath, stack string, dryRun, yes bool, e accessEnv) int {
	raw, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: import file: %v\n", err)
		return exitcode.Failed
	}
	if dryRun {
		_, _ = fmt.Fprintf(e.Stdout, "%s\n", raw)
		return exitcode.OK
	}
	dir, err := os.MkdirTemp("", "stackctl-adopt-")
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return exitcode.Failed
	}
	defer func() { _ = os.RemoveAll(dir) }()
	importFile := filepath.Join(dir, "import.json")
	if err := os.WriteFile(importFile, append(raw, '\n'), 0o600); err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return exitcode.Failed
	}
	// --protect=false: the program does not protect them either, and a
	// protected resource would stop `make destroy`. No code generation:
	// the program already declares them.
	argv := []string{pulumiPath, "import", "--stack", stack, "--file", importFile, "--protect=false", "--generate-code=false"}
	if yes {
		argv = append(argv, "--yes")
	}
	if code := runChild(argv, e.Environ, e); code != exitcode.OK {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: pulumi import failed (exit %d); the stack's state is as it was\n", code)
		return code
	}
	return exitcode.OK
}

// nextSteps says what the first preview after the import shows.
func nextSteps(cfg *stacks.Config, stack, imported string, bootstrapped bool) string {
	s := fmt.Sprintf(`
Imported. Next: make preview STACK=%[1]s. Expect
  ~ update  %[2]s-secrets    talosVersion %[4]s -> %[3]s (the provider records %[4]s on import; no new secrets)
`, stack, cfg.Cluster.Name, cfg.Cluster.TalosVersion, imported)
	if bootstrapped {
		s += fmt.Sprintf("  ~ update  %s-bootstrap  node, endpoint, clientConfiguration (no second bootstrap)\n", cfg.Cluster.Name)
	}
	s += `and creates for the rest (applies, kubeconfig, releases). A "replace" of either
means the import did not match the program: do not run up; see docs/adopting.md
("Adopting a running cluster").
`
	return s
}
