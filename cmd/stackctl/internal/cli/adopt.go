package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/access"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/stacks"
)

// adoptCmd imports a running cluster's secrets into a stack with `pulumi
// import` and records its bootstrap as done (pulumi stack export and
// import), after checking the files, so that the next `up` takes the
// cluster over instead of making a new one. With --release
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
				return fail(exitcode.Failed, "%s %s: %v", sshProxyKeys(cfg), stacks.AccessSSHProxy, err)
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

	bootstrapped := !*newCluster
	rs, err := adopt.Plan(cfg, adopt.PlanOptions{SecretsFile: *secretsFile, Bootstrapped: bootstrapped})
	if err != nil {
		return fail(exitcode.Failed, "%v", err)
	}
	node := ""
	if bootstrapped {
		if node, err = adopt.BootstrapNode(cfg); err != nil {
			return fail(exitcode.BadConfig, "%v", err)
		}
	}
	// The import file holds only the secrets file's path, not its content.
	// The bootstrap is not in it: the Talos plugin cannot import one (see
	// adopt.Import); it is recorded in the state afterwards.
	importFile := map[string]any{"resources": adopt.Import(rs)}
	if *dryRun {
		code := runImport(importFile, *pulumiPath, *stack, true, *yes, e)
		if code == exitcode.OK && bootstrapped {
			_, _ = fmt.Fprintf(e.Stderr, "Then %s-bootstrap is recorded in the stack's state as done (node and endpoint %s, id %s), with pulumi stack export and import.\n", cfg.Cluster.Name, node, adopt.BootstrapID)
		}
		return code
	}
	urns, err := adopt.URNs(*stack, project, rs)
	if err != nil {
		return fail(exitcode.Failed, "%v", err)
	}
	// What the stack has already: run again after a failed record of the
	// bootstrap, it imports nothing twice.
	state, code := exportState(*pulumiPath, *stack, e)
	if code != exitcode.OK {
		return fail(code, "unable to read the state of stack %s (pulumi stack export failed)", *stack)
	}
	if state.Has(string(urns["secrets"])) {
		_, _ = fmt.Fprintf(e.Stderr, "stack %s has %s already: not imported again\n", *stack, urns["secrets"])
	} else {
		if code := runImport(importFile, *pulumiPath, *stack, false, *yes, e); code != exitcode.OK {
			return code
		}
		if bootstrapped {
			if state, code = exportState(*pulumiPath, *stack, e); code != exitcode.OK {
				return notRecorded(e, *stack, "pulumi stack export failed")
			}
		}
	}
	if bootstrapped {
		recorded, err := adopt.RecordBootstrap(state, *stack, project, rs, node)
		if err != nil {
			return notRecorded(e, *stack, err.Error())
		}
		if recorded {
			if code := importState(state, *pulumiPath, *stack, e); code != exitcode.OK {
				return notRecorded(e, *stack, fmt.Sprintf("pulumi stack import failed (exit %d)", code))
			}
			_, _ = fmt.Fprintf(e.Stderr, "recorded %s as done (node %s, id %s)\n", urns["bootstrap"], node, adopt.BootstrapID)
		}
	}
	_, _ = fmt.Fprint(e.Stderr, nextSteps(cfg, *stack, adopt.ImportedTalosVersion(bundle), bootstrapped))
	return exitcode.OK
}

// notRecorded explains a bootstrap that is not in the state after the
// secrets were imported: an `up` would bootstrap etcd again.
func notRecorded(e accessEnv, stack, why string) int {
	_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: the secrets are imported, but the bootstrap could not be recorded as done: %s.\n"+
		"Do not run up on stack %s: it would bootstrap etcd again. Run this adopt again: it imports nothing twice and records the bootstrap.\n", why, stack)
	return exitcode.Failed
}

// exportState reads the stack's state with `pulumi stack export` (secrets
// stay encrypted).
func exportState(pulumiPath, stack string, e accessEnv) (*adopt.StackState, int) {
	dir, err := os.MkdirTemp("", "stackctl-adopt-")
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return nil, exitcode.Failed
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file := filepath.Join(dir, "state.json")
	if code := runChild([]string{pulumiPath, "stack", "export", "--stack", stack, "--file", file}, e.Environ, e); code != exitcode.OK {
		return nil, code
	}
	raw, err := os.ReadFile(file) //nolint:gosec // our own temporary file
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return nil, exitcode.Failed
	}
	s, err := adopt.ParseStackState(raw)
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return nil, exitcode.Failed
	}
	return s, exitcode.OK
}

// importState writes the state back with `pulumi stack import`.
func importState(s *adopt.StackState, pulumiPath, stack string, e accessEnv) int {
	raw, err := s.Marshal()
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return exitcode.Failed
	}
	dir, err := os.MkdirTemp("", "stackctl-adopt-")
	if err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return exitcode.Failed
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file := filepath.Join(dir, "state.json")
	if err := os.WriteFile(file, append(raw, '\n'), 0o600); err != nil {
		_, _ = fmt.Fprintf(e.Stderr, "stackctl adopt: %v\n", err)
		return exitcode.Failed
	}
	return runChild([]string{pulumiPath, "stack", "import", "--stack", stack, "--file", file}, e.Environ, e)
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
  %[2]s-secrets    unchanged (the provider records talosVersion %[3]s on import; the program ignores a change of it: no new secrets)
`, stack, cfg.Cluster.Name, imported)
	if bootstrapped {
		s += fmt.Sprintf("  %s-bootstrap  unchanged (recorded as done, with the program's inputs: no second bootstrap)\n", cfg.Cluster.Name)
	}
	s += `and creates for the rest (applies, kubeconfig, releases). A "replace" of either
means the adopt did not match the program: do not run up; see docs/adopting.md
("Adopting a running cluster").
`
	return s
}
