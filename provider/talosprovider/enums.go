package talosprovider

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/fluodata/talos-pulumi/components/docker"
	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/servers"
	"github.com/fluodata/talos-pulumi/components/talos"
)

// An enum is an input with a closed set of values: a string enum type of
// the index module in the schema, which the SDKs offer as constants (and
// TypeScript as a union of literals) and Pulumi YAML checks. The values
// are the ones the component's validation accepts (a test holds them to
// it: TestSchemaEnumsAreWhatTheComponentsAccept).
type enum struct {
	// name is the type's name in the index module.
	name, description string
	values            []enumValue
	// goType is the Go type of every field of this enum (a named string
	// type), or nil when the fields are plain strings: then fields lists
	// them as Go struct type and pulumi property name.
	goType reflect.Type
	fields []fieldRef
}

type enumValue struct{ value, description string }

type fieldRef struct {
	in   reflect.Type
	name string
}

func field[T any](name string) fieldRef { return fieldRef{reflect.TypeFor[T](), name} }

var enums = []enum{
	{
		name: "Role", description: "What a node runs: the control plane (etcd, the Kubernetes API) or workloads only.",
		goType: reflect.TypeFor[talos.Role](),
		values: []enumValue{
			{string(talos.RoleControlPlane), "A control plane node: etcd and the Kubernetes API."},
			{string(talos.RoleWorker), "A worker node."},
		},
	},
	{
		name: "ProxmoxBios", description: "The VMs' firmware.",
		fields: []fieldRef{field[proxmox.HostSettings]("bios")},
		values: []enumValue{
			{"seabios", "SeaBIOS (legacy BIOS)."},
			{"ovmf", "OVMF (UEFI), with an EFI disk."},
		},
	},
	{
		name: "ProxmoxAddressing", description: "How the VMs get their addresses.",
		fields: []fieldRef{field[proxmox.HostSettings]("addressing")},
		values: []enumValue{
			{proxmox.AddressingDHCPReservation, "DHCP; with dnsmasq set, the host's dnsmasq hands each VM's MAC its reserved IP."},
			{proxmox.AddressingStatic, "The nocloud image reads the address from the VM's cloud-init drive (needs prefixLength and gateway)."},
		},
	},
	{
		name: "ProxmoxCsiFsType", description: "The filesystem of the Proxmox CSI plugin's volumes.",
		fields: []fieldRef{field[proxmox.CSISettings]("fsType")},
		values: []enumValue{
			{proxmox.DefaultCSIFsType, "ext4 (the default)."},
			{proxmox.CSIFsTypeXFS, "XFS."},
		},
	},
	{
		name: "TalosDataVolumeLayout", description: "What a node's data disk becomes.",
		fields: []fieldRef{field[talos.DataVolumeSettings]("layout")},
		values: []enumValue{
			{talos.LayoutLonghorn, "A user volume and the kubelet mount Longhorn needs (the default)."},
			{talos.LayoutPlain, "The user volume alone."},
		},
	},
	{
		name: "VpsOnDestroy", description: "What a destroy does to the servers, which are never deleted.",
		fields: []fieldRef{field[servers.Settings]("onDestroy")},
		values: []enumValue{
			{servers.OnDestroyForget, "Drop the nodes from the stack and leave Talos running."},
			{servers.OnDestroyReset, "Wipe each node's Talos state and reboot it into maintenance mode."},
		},
	},
}

// A schemaDefault is a default a component applies to an input left out,
// set as the schema's default so that every SDK (and the docs) shows it:
// the Go struct the path starts from, the path of pulumi property names,
// and the value, taken from the component (its constants and defaulting
// functions). A test constructs each component with the input left out
// and with this value and finds the same resources
// (TestSchemaDefaultsAreWhatTheComponentsApply). Defaults derived from
// other inputs (the endpoint, the Kubernetes version, a node's MAC, the
// rescue host) are in the descriptions only.
type schemaDefault struct {
	in    reflect.Type
	path  []string
	value any
	// forks are the names of the object types on the path that get a copy
	// of their own, so that this default does not reach another use of
	// the same Go type (Cilium's and the approver's charts share
	// talos.ChartSettings, with different default versions). One per
	// path element but the last; "" for no copy.
	forks []string
}

var defaults = []schemaDefault{
	{in: reflect.TypeFor[talos.ClusterSettings](), path: []string{"cilium", "version"}, value: talos.DefaultCiliumVersion,
		forks: []string{"CiliumChartSettings"}},
	{in: reflect.TypeFor[talos.ClusterSettings](), path: []string{"certApprover", "version"}, value: talos.DefaultApproverVersion,
		forks: []string{"CertApproverChartSettings"}},
	{in: reflect.TypeFor[talos.RolloutSettings](), path: []string{"workerParallelism"}, value: talos.ClusterSettings{}.WorkerParallelism()},
	{in: reflect.TypeFor[talos.NodeSpec](), path: []string{"installDisk"}, value: talos.DefaultInstallDisk},
	{in: reflect.TypeFor[proxmox.Node](), path: []string{"installDisk"}, value: talos.DefaultInstallDisk},
	{in: reflect.TypeFor[servers.Node](), path: []string{"installDisk"}, value: talos.DefaultInstallDisk},
	{in: reflect.TypeFor[servers.Settings](), path: []string{"talosWaitTimeout"}, value: servers.DefaultTalosWaitTimeout},
	{in: reflect.TypeFor[servers.Settings](), path: []string{"onDestroy"}, value: servers.OnDestroyForget},
	{in: reflect.TypeFor[proxmox.HostSettings](), path: []string{"bridge"}, value: proxmox.DefaultBridge},
	{in: reflect.TypeFor[proxmox.HostSettings](), path: []string{"diskDatastore"}, value: proxmox.DefaultDiskDatastore},
	{in: reflect.TypeFor[proxmox.HostSettings](), path: []string{"isoDatastore"}, value: proxmox.DefaultISODatastore},
	{in: reflect.TypeFor[proxmox.HostSettings](), path: []string{"cpuType"}, value: proxmox.DefaultCPUType},
	{in: reflect.TypeFor[proxmox.HostSettings](), path: []string{"bios"}, value: proxmox.DefaultBIOS},
	{in: reflect.TypeFor[proxmox.HostSettings](), path: []string{"addressing"}, value: proxmox.DefaultAddressing},
	{in: reflect.TypeFor[proxmox.HostSettings](), path: []string{"prefixLength"}, value: proxmox.DefaultPrefixLength},
	{in: reflect.TypeFor[proxmox.DNSMasqSettings](), path: []string{"configDir"}, value: proxmox.DefaultDNSMasqDir},
	{in: reflect.TypeFor[proxmox.DNSMasqSettings](), path: []string{"leaseFile"}, value: proxmox.DefaultDNSMasqLeaseFile},
	{in: reflect.TypeFor[proxmox.DNSMasqSettings](), path: []string{"restartCommand"}, value: proxmox.DefaultDNSMasqRestart},
	{in: reflect.TypeFor[proxmox.SSHSettings](), path: []string{"port"}, value: proxmox.DefaultSSHPort},
	{in: reflect.TypeFor[proxmox.SSHSettings](), path: []string{"user"}, value: proxmox.DefaultSSHUser},
	{in: reflect.TypeFor[proxmox.Node](), path: []string{"diskSize"}, value: proxmox.DefaultDiskSize},
	// A node's prefix length defaults to the VPS-wide one, which has this
	// default: a schema default on the node would override vps.prefixLength.
	{in: reflect.TypeFor[servers.Settings](), path: []string{"prefixLength"}, value: servers.DefaultPrefixLength},
	{in: reflect.TypeFor[servers.Rescue](), path: []string{"port"}, value: servers.DefaultRescuePort},
	{in: reflect.TypeFor[servers.Settings](), path: []string{"requireRescue"}, value: servers.DefaultRequireRescue},
	{in: reflect.TypeFor[proxmox.CSISettings](), path: []string{"storageClass"}, value: proxmox.DefaultStorageClass},
	{in: reflect.TypeFor[proxmox.CSISettings](), path: []string{"region"}, value: proxmox.DefaultCSIRegion},
	{in: reflect.TypeFor[proxmox.CSISettings](), path: []string{"fsType"}, value: proxmox.DefaultCSIFsType},
	{in: reflect.TypeFor[proxmox.CSISettings](), path: []string{"chartVersion"}, value: proxmox.DefaultCSIChartVersion},
	{in: reflect.TypeFor[talos.DataVolumeSettings](), path: []string{"name"}, value: talos.DefaultDataVolumeName},
	{in: reflect.TypeFor[talos.DataVolumeSettings](), path: []string{"layout"}, value: talos.LayoutLonghorn},
	{in: reflect.TypeFor[servers.Rescue](), path: []string{"user"}, value: servers.DefaultRescueUser},
	{in: reflect.TypeFor[docker.Settings](), path: []string{"kubernetesPort"}, value: docker.DefaultKubernetesPort},
	{in: reflect.TypeFor[docker.Settings](), path: []string{"talosPort"}, value: docker.DefaultTalosPort},
	{in: reflect.TypeFor[docker.Settings](), path: []string{"privileged"}, value: true},
}

// enumTypes are the schema types of the enums, under their index tokens.
func enumTypes(pkg string) map[string]any {
	out := map[string]any{}
	for _, e := range enums {
		values := make([]any, 0, len(e.values))
		for _, v := range e.values {
			values = append(values, map[string]any{"name": enumMemberName(v.value), "value": v.value, "description": v.description})
		}
		out[pkg+":index:"+e.name] = map[string]any{"type": "string", "description": e.description, "enum": values}
	}
	return out
}

// enumMemberName is a value's constant name in the SDKs: ControlPlane for
// "controlplane" would need a dictionary, so the words of the value:
// "dhcp-reservation" is DhcpReservation.
func enumMemberName(v string) string {
	var b strings.Builder
	for w := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// enumOf is the enum token of the field name of the Go struct in, whose Go
// type is t, or "".
func enumOf(pkg string, in reflect.Type, name string, t reflect.Type) string {
	for _, e := range enums {
		if e.goType != nil && t == e.goType {
			return pkg + ":index:" + e.name
		}
		for _, f := range e.fields {
			if f.in == in && f.name == name {
				return pkg + ":index:" + e.name
			}
		}
	}
	return ""
}

// setEnum points the property prop at the enum type token: a string
// property, or a list of them.
func setEnum(prop map[string]any, token string) error {
	if items, _ := prop["items"].(map[string]any); items != nil {
		return setEnum(items, token)
	}
	if prop["type"] != "string" {
		return fmt.Errorf("is %v, not a string: it cannot be the enum %s", prop["type"], token)
	}
	delete(prop, "type")
	prop["$ref"] = "#/types/" + token
	return nil
}

// checkDefault tells whether value suits the property (its JSON type).
func checkDefault(prop map[string]any, value any) error {
	typ, _ := prop["type"].(string)
	if ref, _ := prop["$ref"].(string); ref != "" {
		typ = "string" // the enums are strings
	}
	ok := false
	switch value.(type) {
	case string:
		ok = typ == "string"
	case int:
		ok = typ == "integer" || typ == "number"
	case bool:
		ok = typ == "boolean"
	}
	if !ok {
		return fmt.Errorf("the default %s does not suit a property of type %q", strconv.Quote(fmt.Sprint(value)), typ)
	}
	return nil
}
