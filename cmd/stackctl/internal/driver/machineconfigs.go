package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/privatefile"
)

// MachineConfigsOutput is the stack output with each node's machine config
// by node name, and MachineConfigDir the directory of the access files it
// goes to, one <node>.yaml per node: what `talosctl apply-config` takes
// when the program cannot run.
const (
	MachineConfigsOutput = "machineConfigurations"
	MachineConfigDir     = "machineconfig"
)

// WriteMachineConfigs writes each node's machine config to dir/<node>.yaml
// (0600, dir 0700) and removes the files of nodes the stack no longer has,
// so the directory is the cluster as the last `up` left it. A name that is
// no node name (a DNS label) is refused before anything is written.
func WriteMachineConfigs(dir string, configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for name, text := range configs {
		if !inputs.IsDNSLabel(name) {
			return fmt.Errorf("unable to write machine configs: %q is no node name", name)
		}
		if text == "" {
			return fmt.Errorf("unable to write machine configs: node %s has none (its config was never applied)", name)
		}
		names = append(names, name)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("unable to create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // a directory needs x to be entered
		return fmt.Errorf("unable to restrict %s to its owner: %w", dir, err)
	}
	for _, name := range names {
		if err := privatefile.Write(filepath.Join(dir, name+".yaml"), []byte(configs[name])); err != nil {
			return fmt.Errorf("unable to write the machine config of %s: %w", name, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("unable to read %s: %w", dir, err)
	}
	for _, e := range entries {
		node, ok := strings.CutSuffix(e.Name(), ".yaml")
		if ok && e.Type().IsRegular() && !slices.Contains(names, node) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("unable to remove the machine config of %s, which left the stack: %w", node, err)
			}
		}
	}
	return nil
}

// machineConfigsOf is the machineConfigurations output's value as the
// Automation API reads it (a JSON object of strings); ok is false when the
// stack has no such output (its last `up` ran an older version).
func machineConfigsOf(v any) (configs map[string]string, ok bool, err error) {
	if v == nil {
		return nil, false, nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		return nil, true, fmt.Errorf("unable to read output %s: %T is no map of node names to configs", MachineConfigsOutput, v)
	}
	configs = make(map[string]string, len(m))
	for name, text := range m {
		s, isString := text.(string)
		if !isString {
			return nil, true, fmt.Errorf("unable to read output %s: node %s's config is %T, not text", MachineConfigsOutput, name, text)
		}
		configs[name] = s
	}
	return configs, true, nil
}
