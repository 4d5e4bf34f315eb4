package talosprovider

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

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
