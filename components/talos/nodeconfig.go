package talos

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"go.yaml.in/yaml/v3"
)

// baseConfig is an apply's base machine config (a secret input).
func baseConfig(inputs resource.PropertyMap) string {
	if v := PlainValue(inputs["machineConfigurationInput"]); v.IsString() {
		return v.StringValue()
	}
	return ""
}

// kubeletImage is machine.kubelet.image of a machine config's v1alpha1
// document; "" when it has none.
func kubeletImage(config string) string {
	dec := yaml.NewDecoder(strings.NewReader(config))
	for {
		var doc struct {
			Version string `yaml:"version"`
			Machine struct {
				Kubelet struct {
					Image string `yaml:"image"`
				} `yaml:"kubelet"`
			} `yaml:"machine"`
		}
		if err := dec.Decode(&doc); err != nil {
			return ""
		}
		if doc.Version == "v1alpha1" {
			return doc.Machine.Kubelet.Image
		}
	}
}

// MergedConfig is an apply's machine config: its base config with its
// patches applied, what the provider's ModifyPlan stores as its
// machineConfiguration (terraform-provider-talos v0.10.1,
// talos_machine_configuration_apply_resource.go:629-673).
func MergedConfig(inputs resource.PropertyMap) ([]byte, error) {
	return mergeConfig(nodeConfig{base: baseConfig(inputs), patches: stringsOf(inputs["configPatches"])})
}

// mergedKubelet is the kubelet image of an apply's config.
func mergedKubelet(inputs resource.PropertyMap) (string, error) {
	out, err := MergedConfig(inputs)
	if err != nil {
		return "", err
	}
	return kubeletImage(string(out)), nil
}

// stringsOf is an array input's strings (secrets unwrapped).
func stringsOf(v resource.PropertyValue) []string {
	v = PlainValue(v)
	if !v.IsArray() {
		return nil
	}
	var out []string
	for _, e := range v.ArrayValue() {
		if e = PlainValue(e); e.IsString() {
			out = append(out, e.StringValue())
		}
	}
	return out
}

// pinnedConfig is the node's new machine config (base and patches merged as
// the provider merges them) with its kubelet kept on kubelet.
func pinnedConfig(nc nodeConfig, kubelet string) ([]byte, error) {
	pin := fmt.Sprintf("machine:\n  kubelet:\n    image: %s\n", kubelet)
	return mergeConfig(nodeConfig{base: nc.base, patches: append(append([]string{}, nc.patches...), pin)})
}

// mergeConfig is a base config with its patches applied, as the provider
// applies them.
func mergeConfig(nc nodeConfig) ([]byte, error) {
	patches, err := configpatcher.LoadPatches(nc.patches)
	if err != nil {
		return nil, fmt.Errorf("unable to load the patches: %w", err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes([]byte(nc.base)), patches)
	if err != nil {
		return nil, fmt.Errorf("unable to apply the patches: %w", err)
	}
	return out.Bytes()
}

// installerImage finds the installer image in an apply's config patches
// (the last patch that sets machine.install.image); "" when none does.
func installerImage(inputs resource.PropertyMap) string {
	patches := PlainValue(inputs["configPatches"])
	if !patches.IsArray() {
		return ""
	}
	image := ""
	for _, p := range patches.ArrayValue() {
		if p = PlainValue(p); !p.IsString() || !strings.Contains(p.StringValue(), "image") {
			continue
		}
		var doc struct {
			Machine struct {
				Install struct {
					Image string `yaml:"image"`
				} `yaml:"install"`
			} `yaml:"machine"`
		}
		if yaml.Unmarshal([]byte(p.StringValue()), &doc) == nil && doc.Machine.Install.Image != "" {
			image = doc.Machine.Install.Image
		}
	}
	return image
}

// SplitImage splits an image reference into its repository and its tag
// (a digest dropped).
func SplitImage(ref string) (repo, tag string) {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, ""
}
