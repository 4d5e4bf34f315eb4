package talos

import (
	"context"
	"reflect"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// NodeStatus is one node as the run found it: the cluster's nodes output,
// by node name. The program reads it back on the next run (its roles,
// versions, machines and data disks), so its keys stay as they are.
type NodeStatus struct {
	// IP is the node's address.
	IP string `pulumi:"ip"`
	// Role is the node's machine type: controlplane or worker.
	Role string `pulumi:"role"`
	// TalosVersion is the Talos version the node runs ("unknown" when it
	// did not answer).
	TalosVersion string `pulumi:"talosVersion"`
	// KubeletVersion is the version its kubelet runs ("unknown" when
	// Kubernetes did not say).
	KubeletVersion string `pulumi:"kubeletVersion"`
	// Machine names what of the node's machine cannot change without a new
	// one (a VM's id and host), where the platform says.
	Machine *string `pulumi:"machine,optional"`
	// DataVolume is where the node's data volume is mounted, for a node
	// with a data disk.
	DataVolume *string `pulumi:"dataVolume,optional"`
	// DataDiskSize is the size of the node's data disk in GiB, which a
	// later run may not shrink.
	DataDiskSize *int `pulumi:"dataDiskSize,optional"`
}

// NodeStatusOutput is a NodeStatus output.
type NodeStatusOutput struct{ *pulumi.OutputState }

// ElementType is NodeStatus.
func (NodeStatusOutput) ElementType() reflect.Type { return reflect.TypeFor[NodeStatus]() }

// NodeStatusMapOutput is an output of NodeStatus by node name.
type NodeStatusMapOutput struct{ *pulumi.OutputState }

// ElementType is a map of NodeStatus.
func (NodeStatusMapOutput) ElementType() reflect.Type {
	return reflect.TypeFor[map[string]NodeStatus]()
}

// ToNodeStatusMapOutputWithContext is the output itself.
func (o NodeStatusMapOutput) ToNodeStatusMapOutputWithContext(context.Context) NodeStatusMapOutput {
	return o
}

// MapIndex is one node's status.
func (o NodeStatusMapOutput) MapIndex(k pulumi.StringInput) NodeStatusOutput {
	return pulumi.All(o, k).ApplyT(func(vs []any) NodeStatus {
		return vs[0].(map[string]NodeStatus)[vs[1].(string)]
	}).(NodeStatusOutput)
}

func init() {
	pulumi.RegisterOutputType(NodeStatusOutput{})
	pulumi.RegisterOutputType(NodeStatusMapOutput{})
}

// nodeStatus is a node's status as observe records it.
func nodeStatus(m map[string]string, n NodeSpec, mount string) NodeStatus {
	s := NodeStatus{IP: m["ip"], Role: m["role"], TalosVersion: m[TalosVersionOutput], KubeletVersion: m[KubeletVersionOutput]}
	if v := m["machine"]; v != "" {
		s.Machine = &v
	}
	if mount != "" {
		size := n.DataDiskSize
		s.DataVolume, s.DataDiskSize = &mount, &size
	}
	return s
}
