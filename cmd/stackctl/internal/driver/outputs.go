package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/internal/privatefile"
)

// AccessFiles are the outputs `outputs` writes to files: credentials, so
// the directory is 0700 and each file 0600.
var AccessFiles = []string{"kubeconfig", "talosconfig"}

// writeOutputs writes the stack's access files and its nodes' machine
// configs. Each file is written to a
// temporary name and renamed, so a failed run leaves the previous files.
func writeOutputs(ctx context.Context, stack auto.Stack, o Options, workDir string, env Env, sum *Summary) error {
	outs, err := stack.Outputs(ctx)
	if err != nil {
		return classify(ctx, o, fmt.Errorf("unable to read the stack's outputs: %w", err))
	}
	for name := range outs {
		sum.Outputs = append(sum.Outputs, name)
	}
	dir := o.OutDir
	if dir == "" {
		dir = filepath.Join(workDir, ".access", o.Stack)
	}
	contents := map[string]string{}
	for _, name := range AccessFiles {
		v, ok := outs[name].Value.(string)
		if !ok || v == "" {
			return fail(exitcode.Failed, nil, "stack %s has no %s output yet: run up first", o.Stack, name)
		}
		contents[name] = v
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(exitcode.Failed, err, "cannot create %s: %v", dir, err)
	}
	// MkdirAll keeps the mode of an existing directory.
	if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // a directory needs x to be entered
		return fail(exitcode.Failed, err, "cannot restrict %s to its owner: %v", dir, err)
	}
	for _, name := range AccessFiles {
		if err := privatefile.Write(filepath.Join(dir, name), []byte(contents[name])); err != nil {
			return fail(exitcode.Failed, err, "writing %s: %v", name, err)
		}
	}
	configs, ok, err := machineConfigsOf(outs[MachineConfigsOutput].Value)
	switch {
	case err != nil:
		return fail(exitcode.Failed, err, "%v", err)
	case !ok:
		_, _ = fmt.Fprintf(env.Stderr, "note: stack %s has no %s output yet (the next up adds it): no machine configs written\n", o.Stack, MachineConfigsOutput)
	default:
		if err := WriteMachineConfigs(filepath.Join(dir, MachineConfigDir), configs); err != nil {
			return fail(exitcode.Failed, err, "%v", err)
		}
	}
	_, _ = fmt.Fprintf(env.Stdout, "export KUBECONFIG=%s TALOSCONFIG=%s\n",
		filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "talosconfig"))
	return nil
}
