// Command waitprogram is a Pulumi program for the integration test of the
// waits that run in the program (issue 25): a Kubernetes API wait and a
// VPS node's Talos wait, each a command resource that runs no command with
// the components' own before-create hook (talos.RunKubeWait, servers.RunWait),
// against the loopback servers the test names in the environment
// (WAIT_KUBECONFIG_FILE, WAIT_TALOS_PORT).
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/pulumi/pulumi-command/sdk/go/command/local"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/cancelfile"
	"github.com/fluodata/talos-pulumi/internal/rollout"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		kubeconfig, err := os.ReadFile(os.Getenv("WAIT_KUBECONFIG_FILE"))
		if err != nil {
			return fmt.Errorf("unable to read the test's kubeconfig: %w", err)
		}
		deps := talos.Deps{
			Context: cancelfile.ForProgram(),
			Timing:  rollout.Timing{Poll: 100 * time.Millisecond, ProgressEvery: time.Second},
		}.WithDefaults(ctx)

		api, err := deps.Hooks.Bind("it-kube-wait", talos.BeforeCreate, "it-api-ready", func(a *pulumi.ResourceHookArgs) error {
			return talos.RunKubeWait(ctx, deps, a)
		})
		if err != nil {
			return err
		}
		_, err = local.NewCommand(ctx, "it-api-ready", &local.CommandArgs{
			Environment: pulumi.StringMap{
				"KUBECONFIG_DATA": pulumi.ToSecret(pulumi.String(string(kubeconfig))).(pulumi.StringOutput),
				"WAIT_FOR":        pulumi.String("api"),
				"WAIT_TIMEOUT":    pulumi.String("20"),
			},
		}, api, pulumi.IgnoreChanges([]string{"environment"}))
		if err != nil {
			return err
		}

		env := servers.Wait{NodeName: "node-0", NodeIP: "127.0.0.1", Timeout: 3 * time.Second, TimeoutLabel: "3s", Hint: "switch its boot to the disk"}.Env()
		env["TALOS_PORT"] = os.Getenv("WAIT_TALOS_PORT")
		node, err := deps.Hooks.Bind("it-talos-wait", talos.BeforeCreate, "it-wait-node-0", func(a *pulumi.ResourceHookArgs) error {
			return servers.RunWait(deps.Context, deps.Log(ctx, a.URN), talos.HookEnv(a.NewInputs), deps.Timing)
		})
		if err != nil {
			return err
		}
		_, err = local.NewCommand(ctx, "it-wait-node-0", &local.CommandArgs{Environment: pulumi.ToStringMap(env)},
			node, pulumi.IgnoreChanges([]string{"environment"}))
		return err
	})
}
