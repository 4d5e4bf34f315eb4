package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/exitcode"
)

// machineConfigsCmd writes the machine configs that `pulumi stack output
// machineConfigurations --show-secrets --json` prints on stdin, one
// <node>.yaml per node in --out (make outputs). Nothing is written unless
// the whole document reads.
func machineConfigsCmd(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("machine-configs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory for the <node>.yaml files (made 0700)")
	if err := fs.Parse(args); err != nil {
		return exitcode.Usage
	}
	if *out == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "usage: pulumi stack output "+driver.MachineConfigsOutput+" --show-secrets --json | stackctl machine-configs --out DIR")
		return exitcode.Usage
	}
	var configs map[string]string
	if err := json.NewDecoder(stdin).Decode(&configs); err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl machine-configs: unable to read the %s output: %v\n", driver.MachineConfigsOutput, err)
		return exitcode.Failed
	}
	if err := driver.WriteMachineConfigs(*out, configs); err != nil {
		_, _ = fmt.Fprintf(stderr, "stackctl machine-configs: %v\n", err)
		return exitcode.Failed
	}
	return exitcode.OK
}
