package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/doctor"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/kubeapi"
)

// gitopsTimeout bounds the one call to the cluster's API.
const gitopsTimeout = 10 * time.Second

// Argo CD's spellings of a good state (health.HealthStatusHealthy,
// SyncStatusCodeSynced).
const (
	argoSynced  = "Synced"
	argoHealthy = "Healthy"
)

// gitopsStatusCmd is `stackctl gitops-status`: it reads the root
// Application of the stack's GitOps hand-off through the kubeconfig of the
// stack's outputs, and says where Argo CD syncs from, whether it is synced
// and healthy, and which resources are not. Exit code OK when the
// Application is Synced and Healthy, Failed otherwise. It reads neither
// the stack's config nor its Proxmox API: the Application's namespace and
// name are the component's constants.
func gitopsStatusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gitops-status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stack := fs.String("stack", os.Getenv("STACK"), "stack name (default: $STACK)")
	outputsJSON := fs.String("outputs-json", "", "read `pulumi stack output --json --show-secrets` output from this file instead of running pulumi")
	pulumiPath := fs.String("pulumi", "pulumi", "path of the pulumi CLI that reads the stack's outputs")
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "stackctl gitops-status: unexpected arguments %v\n", fs.Args())
		return exitcode.Usage
	}
	if *stack == "" {
		_, _ = fmt.Fprintln(stderr, "stackctl gitops-status: --stack (or STACK) is required")
		return exitcode.Usage
	}
	fail := func(format string, a ...any) int {
		_, _ = fmt.Fprintf(stderr, "stackctl gitops-status: "+format+"\n", a...)
		return exitcode.Failed
	}
	outs, err := stackOutputs(*pulumiPath, *outputsJSON)(ctx, *stack)
	if err != nil {
		return fail("%v", err)
	}
	kc, _ := outs["kubeconfig"].(string)
	if kc == "" {
		return fail("stack %s has no kubeconfig output: its cluster is not made yet (or was destroyed); run `make up STACK=%s` first", *stack, *stack)
	}
	k, err := kubeapi.New([]byte(kc), kubeapi.WithTimeout(gitopsTimeout))
	if err != nil {
		return fail("the kubeconfig output: %v", err)
	}
	defer k.Close()
	ns, name := talos.ArgoCDNamespace, talos.RootApplicationName
	app, err := k.ArgoApplication(ctx, ns, name)
	switch {
	case errors.Is(err, kubeapi.ErrNotFound):
		return fail("stack %s has no GitOps hand-off: its cluster has no Argo CD Application %s/%s (the stack has no `gitops` section, or Argo CD is not installed yet); add a gitops section to Pulumi.%s.yaml and run `make up STACK=%s`", *stack, ns, name, *stack, *stack)
	case err != nil:
		return fail("%v; run this where the cluster's API answers (`make gitops-status` reaches it through the stack's access, proxmox.access: ssh-proxy included; by hand, inside `make proxy`'s environment)", err)
	}
	printApplication(stdout, ns, name, app)
	if app.Sync == argoSynced && app.Health == argoHealthy {
		return exitcode.OK
	}
	return fail("Application %s/%s is not synced and healthy: sync %s, health %s%s", ns, name, orUnknown(app.Sync), orUnknown(app.Health), resourcesListed(len(unsettled(app.Resources))))
}

// stackOutputs reads a stack's outputs, secrets shown: from the file
// outputsJSON when it is set (tests), else with the pulumi CLI at
// pulumiPath (doctor.Env.WithPulumi's).
func stackOutputs(pulumiPath, outputsJSON string) func(context.Context, string) (map[string]any, error) {
	if outputsJSON == "" {
		return doctor.DefaultEnv().WithPulumi(pulumiPath).StackOutputs
	}
	return func(context.Context, string) (map[string]any, error) {
		raw, err := os.ReadFile(outputsJSON) //nolint:gosec // a path the operator gives
		if err != nil {
			return nil, fmt.Errorf("unable to read the stack's outputs: %w", err)
		}
		var outs map[string]any
		if err := json.Unmarshal(raw, &outs); err != nil {
			return nil, fmt.Errorf("unable to read the stack's outputs: %w", err)
		}
		return outs, nil
	}
}

// printApplication writes where the Application syncs from, its sync,
// health and last operation, and each resource not synced or not healthy.
func printApplication(w io.Writer, ns, name string, app kubeapi.ApplicationStatus) {
	line := func(label, value string) { _, _ = fmt.Fprintf(w, "%-10s %s\n", label+":", value) }
	_, _ = fmt.Fprintf(w, "Argo CD Application %s/%s\n", ns, name)
	if len(app.Sources) == 0 {
		line("repo", "-")
	}
	for _, s := range app.Sources {
		line("repo", s.RepoURL)
		rev := s.TargetRevision
		if rev == "" {
			rev = "HEAD" // Argo CD's default
		}
		line("revision", rev)
		if s.Chart != "" {
			line("chart", s.Chart)
		} else {
			line("path", orDash(s.Path))
		}
	}
	sync := orUnknown(app.Sync)
	switch synced := strings.Join(app.Revisions, ", "); {
	case app.Revision != "":
		sync += " to " + app.Revision
	case synced != "":
		sync += " to " + synced
	}
	line("sync", sync)
	health := orUnknown(app.Health)
	if app.HealthMessage != "" {
		health += ": " + app.HealthMessage
	}
	line("health", health)
	if app.OperationPhase != "" {
		op := app.OperationPhase
		if app.OperationMessage != "" {
			op += ": " + app.OperationMessage
		}
		line("operation", op)
	}
	bad := unsettled(app.Resources)
	if len(bad) == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "\n%d of %d resources not synced or not healthy:\n", len(bad), len(app.Resources))
	for _, r := range bad {
		obj := r.Name
		if r.Namespace != "" {
			obj = r.Namespace + "/" + r.Name
		}
		health := orDash(r.Health)
		if r.HealthMessage != "" {
			health += " (" + r.HealthMessage + ")"
		}
		_, _ = fmt.Fprintf(w, "  %s %s: sync=%s, health=%s\n", r.Kind, obj, orUnknown(r.Sync), health)
	}
}

// unsettled are the resources not Synced, or with a health other than
// Healthy (a kind without a health check, a ConfigMap, has none).
func unsettled(resources []kubeapi.ApplicationResource) []kubeapi.ApplicationResource {
	var out []kubeapi.ApplicationResource
	for _, r := range resources {
		if r.Sync != argoSynced || (r.Health != "" && r.Health != argoHealthy) {
			out = append(out, r)
		}
	}
	return out
}

func resourcesListed(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return " (1 resource listed above)"
	}
	return fmt.Sprintf(" (%d resources listed above)", n)
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
