package proxmox

import "github.com/fluodata/talos-pulumi/components/talos"

// PreviousVMsFrom reads the VMs of the last run from the state's resources, by
// node name.
func PreviousVMsFrom(resources map[string]any) map[string]PreviousVM {
	var vms map[string]PreviousVM
	for _, r := range resources {
		m, _ := r.(map[string]any)
		if m["type"] != VMType {
			continue
		}
		out, _ := m["outputs"].(map[string]any)
		name, vm, ok := PreviousVMFrom(out)
		if !ok {
			continue
		}
		if vms == nil {
			vms = map[string]PreviousVM{}
		}
		vms[name] = vm
	}
	return vms
}

// PreviousCSIRegionsFrom reads the Proxmox CSI plugin's clusters of the last
// run (its release's values, config.clusters) from the state: each API's
// region, by its URL.
func PreviousCSIRegionsFrom(resources map[string]any) map[string]string {
	var regions map[string]string
	for _, r := range resources {
		m, _ := r.(map[string]any)
		out, _ := m["outputs"].(map[string]any)
		if m["type"] != talos.HelmReleaseType || out["namespace"] != CSINamespace {
			continue
		}
		values, _ := out["values"].(map[string]any)
		config, _ := values["config"].(map[string]any)
		clusters, _ := config["clusters"].([]any)
		for _, c := range clusters {
			cluster, _ := c.(map[string]any)
			url, _ := cluster["url"].(string)
			region, _ := cluster["region"].(string)
			if url == "" || region == "" {
				continue
			}
			if regions == nil {
				regions = map[string]string{}
			}
			regions[url] = region
		}
	}
	return regions
}
