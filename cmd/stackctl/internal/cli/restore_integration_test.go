//go:build integration

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/client"
	"github.com/pulumiverse/pulumi-talos/sdk/go/talos/machine"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/adopt"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
	"github.com/fluodata/talos-pulumi/internal/talosapi/talosapitest"
	"github.com/fluodata/talos-pulumi/stacks"
)

// TestIntegrationBackupDestroyRestore is issue 26's sequence with the real
// pulumi CLI and Talos and command plugins, on a local file backend: `up`
// of a stack, `stackctl backup`, `destroy` and `stack rm` (the state is
// gone; the stack file is kept), then `stackctl restore --create` into
// fresh nodes of the Talos fake. The cluster comes back with the backup's
// etcd keys, the same Talos secrets (the secrets resource's values and the
// talosconfig's CA) and the same outputs, without a second bootstrap, and a
// preview afterwards shows no change.
//
// The program is the real program's chain where it matters to a restore
// (components, secrets, the bootstrap of the first control plane, what
// depends on it, a wait among those, the outputs backup and restore read);
// a command stands for each node's machine and config apply, which needs
// Proxmox. Run it with `make integration`.
func TestIntegrationBackupDestroyRestore(t *testing.T) {
	pulumiPath, err := exec.LookPath("pulumi")
	if err != nil {
		t.Skip("SKIPPED: the pulumi CLI is not on PATH, so the restore integration test did not run")
	}
	example := directExample(t)
	dir, pcli := realCLIProject(t, pulumiPath)
	initExampleStack(t, dir, pcli, "it", example)
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	identityFile := filepath.Join(dir, "backup-key.txt")
	require.NoError(t, os.WriteFile(identityFile, []byte(id.String()+"\n"), 0o600))
	pcli("config", "set", "--path", "--stack", "it", "backup.target", "file://"+filepath.Join(dir, "backups"))
	pcli("config", "set", "--path", "--stack", "it", "backup.recipients[0]", id.Recipient().String())

	src, err := stacks.SourceFromConfigJSON([]byte(pcli("config", "--show-secrets", "--json", "--stack", "it")))
	require.NoError(t, err)
	cfg, diags := stacks.Load(src)
	require.NoError(t, diags.Err())
	var specs []talosapitest.NodeSpec
	for _, ref := range cfg.Nodes.Refs() {
		role := talosapitest.Worker
		if ref.Role == stacks.RoleControlPlane {
			role = talosapitest.ControlPlane
		}
		specs = append(specs, talosapitest.NodeSpec{IP: ref.IP, Hostname: ref.Name, Role: role})
	}

	standIn := startTalosStandIn(t) // answers the plugin's one bootstrap
	nodes := talosapitest.Start(t, specs...)
	keys := map[string]string{"/registry/secrets/default/app": "s3cr3t", "/registry/configmaps/default/settings": "a: b"}
	nodes.SetEtcdKeys(keys)

	var out, errOut bytes.Buffer
	talosDown := false // the nodes' Talos API does not answer
	run := func(o driver.Options) int {
		t.Helper()
		out.Reset()
		errOut.Reset()
		o.Stack, o.WorkDir = "it", dir
		o.BackendURL = os.Getenv("PULUMI_BACKEND_URL")
		env := backupEnv{
			Stdout: &out, Stderr: &errOut, Getenv: os.Getenv, Now: time.Now,
			NewTalos: func(_ string, opts ...talosapi.Option) (*talosapi.Client, error) {
				if talosDown {
					return nil, errors.New("the Talos API does not answer")
				}
				crt, key := nodes.AdminCert()
				return talosapi.New(talosapi.Credentials{CA: nodes.CA(), Cert: crt, Key: key},
					append(opts, talosapi.WithAddress(nodes.Address), talosapi.WithTimeouts(time.Second, 2*time.Second))...)
			},
		}
		start := time.Now()
		code := driver.Run(t.Context(), o, driver.Env{
			Pulumi:  mustCLI(t, pulumiPath),
			Program: func(context.Context, stacks.Source, string) pulumi.RunFunc { return restoreChain(cfg, standIn.addr) },
			Backup:  func(ctx context.Context, req driver.BackupRequest) error { return runBackup(ctx, req, env) },
			Restore: func(ctx context.Context, req driver.RestoreRequest) error { return runRestore(ctx, req, env) },
			Stdout:  &out, Stderr: &errOut, Getenv: os.Getenv, Now: time.Now,
		})
		t.Logf("stackctl %s: exit %d in %s", o.Op, code, time.Since(start).Round(time.Millisecond))
		return code
	}
	log := func() string { return out.String() + errOut.String() }

	require.Equal(t, exitcode.OK, run(driver.Options{Op: driver.OpUp}), log())
	require.EqualValues(t, 1, standIn.boots.Load())
	before := plainState(t, pcli)
	outputsBefore := outputsOf(t, pcli)

	require.Equal(t, exitcode.OK, run(driver.Options{Op: driver.OpBackup}), log())
	require.Contains(t, out.String(), "backup it/")

	// Everything goes: the cluster's nodes (fresh ones take their place),
	// the resources, and the stack's state; the stack file stays.
	require.Equal(t, exitcode.OK, run(driver.Options{Op: driver.OpDestroy}), log())
	pcli("stack", "rm", "it", "--yes", "--force", "--preserve-config")
	nodes = talosapitest.StartFresh(t, specs...)

	// A restore that stops after the machines came up (here the Talos API
	// does not answer; an interrupt there is the same), then run again: it
	// goes on without seeding the state twice.
	talosDown = true
	require.Equal(t, exitcode.Failed, run(driver.Options{Op: driver.OpRestore, Create: true, Identity: identityFile}), log())
	require.Contains(t, errOut.String(), "seeded the state from the backup")
	require.Contains(t, errOut.String(), "the Talos API does not answer")
	require.False(t, nodes.Bootstrapped())
	talosDown = false
	require.Equal(t, exitcode.OK, run(driver.Options{Op: driver.OpRestore, Identity: identityFile}), log())
	t.Logf("restore: %s", out.String())
	require.Contains(t, errOut.String(), "its state is not seeded again")
	require.NotContains(t, errOut.String(), "seeded the state from the backup")

	require.Equal(t, keys, nodes.EtcdKeys(), "the backup's etcd contents")
	require.Equal(t, cfg.Nodes.ControlPlanes[0].Name, strings.Join(nodes.Members(), ","))
	require.EqualValues(t, 1, standIn.boots.Load(), "no second bootstrap: etcd was recovered instead")
	after := plainState(t, pcli)
	require.Equal(t, before[adopt.SecretsType], after[adopt.SecretsType], "the same Talos secrets")
	require.Equal(t, before[adopt.BootstrapType], after[adopt.BootstrapType])
	require.Equal(t, outputsBefore, outputsOf(t, pcli), "the same outputs")

	require.Equal(t, exitcode.OK, run(driver.Options{Op: driver.OpPreview, ExitOnChanges: true}), "a preview after the restore: %s", log())
}

// restoreChain registers what a restore deals with as the program does
// (components/talos/build.go): the platform and Talos components, the
// secrets, a machine-and-apply stand-in per node, the bootstrap of the
// first control plane after its apply (endpoint: the stand-in Talos API),
// what lives in etcd after the bootstrap (a release stand-in), the wait for
// Ready nodes after it, and the outputs `stackctl backup` reads.
func restoreChain(cfg *stacks.Config, endpoint string) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		name := cfg.Cluster.Name
		var platform, cluster pulumi.ResourceState
		if err := ctx.RegisterComponentResource(proxmox.ClusterType, name, &platform); err != nil {
			return err
		}
		if err := ctx.RegisterComponentResource(talos.ClusterType, name, &cluster, pulumi.Parent(&platform)); err != nil {
			return err
		}
		in := pulumi.Parent(&cluster)
		secrets, err := machine.NewSecrets(ctx, name+talos.SecretsSuffix, &machine.SecretsArgs{
			TalosVersion: pulumi.String(cfg.Cluster.TalosVersion),
		}, in, pulumi.IgnoreChanges([]string{"talosVersion"}))
		if err != nil {
			return err
		}
		var first pulumi.Resource
		var firstIP string
		nodes := pulumi.Map{}
		var cps pulumi.StringArray
		for _, ref := range cfg.Nodes.Refs() {
			apply, err := local.NewCommand(ctx, name+"-apply-"+ref.Name, &local.CommandArgs{Create: pulumi.String("true")},
				in, pulumi.DependsOn([]pulumi.Resource{secrets}))
			if err != nil {
				return err
			}
			if first == nil {
				first, firstIP = apply, ref.IP
			}
			if ref.Role == stacks.RoleControlPlane {
				cps = append(cps, pulumi.String(ref.IP))
			}
			nodes[ref.Name] = pulumi.StringMap{"ip": pulumi.String(ref.IP), "role": pulumi.String(string(ref.Role))}
		}
		boot, err := machine.NewBootstrap(ctx, name+talos.BootstrapSuffix, &machine.BootstrapArgs{
			ClientConfiguration: secrets.ClientConfiguration, Node: pulumi.String(firstIP), Endpoint: pulumi.String(endpoint),
		}, in, pulumi.DependsOn([]pulumi.Resource{first}))
		if err != nil {
			return err
		}
		release, err := local.NewCommand(ctx, name+talos.CiliumSuffix, &local.CommandArgs{Create: pulumi.String("true")},
			in, pulumi.DependsOn([]pulumi.Resource{boot}))
		if err != nil {
			return err
		}
		if _, err := local.NewCommand(ctx, name+talos.NodesReadySuffix, &local.CommandArgs{Create: pulumi.String("true")},
			in, pulumi.DependsOn([]pulumi.Resource{release})); err != nil {
			return err
		}
		cc := secrets.ClientConfiguration
		tc := client.GetConfigurationOutput(ctx, client.GetConfigurationOutputArgs{
			ClusterName: pulumi.String(name),
			ClientConfiguration: client.GetConfigurationClientConfigurationArgs{
				CaCertificate: cc.CaCertificate(), ClientCertificate: cc.ClientCertificate(), ClientKey: cc.ClientKey(),
			},
			Endpoints: cps,
		}, pulumi.Parent(&cluster)).TalosConfig()
		ctx.Export("talosconfig", pulumi.ToSecret(tc))
		ctx.Export("clusterName", pulumi.String(name))
		ctx.Export("talosVersion", pulumi.String(cfg.Cluster.TalosVersion))
		ctx.Export("kubernetesVersion", pulumi.String("1.35.0"))
		ctx.Export("nodes", nodes)
		return nil
	}
}

func mustCLI(t *testing.T, path string) *driver.CLI {
	t.Helper()
	cli, err := driver.NewCLI(t.Context(), path, time.Minute)
	require.NoError(t, err)
	return cli
}

// plainState is the stack's resources by type (the first of each), their
// outputs decrypted, without the bridge's cache.
func plainState(t *testing.T, pcli func(args ...string) string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, r := range resourcesOf(t, pcli("stack", "export", "--stack", "it", "--show-secrets")) {
		if _, seen := out[r.Type]; !seen && r.Outputs != nil {
			o := maps.Clone(r.Outputs)
			delete(o, "__pulumi_raw_state_delta")
			out[r.Type] = o
		}
	}
	return out
}

func outputsOf(t *testing.T, pcli func(args ...string) string) map[string]any {
	t.Helper()
	var outs map[string]any
	require.NoError(t, json.Unmarshal([]byte(pcli("stack", "output", "--stack", "it", "--json", "--show-secrets")), &outs))
	return outs
}
