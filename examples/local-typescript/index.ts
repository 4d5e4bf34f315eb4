// The cluster of ../../Pulumi.local.yaml.example (one control plane, one
// worker, in Docker on this machine) in TypeScript, with the talos-anywhere
// package's generated SDK (`pulumi install` makes it from ../../provider),
// and one object in the new cluster through a provider made from its
// kubeconfig. Inputs: docs/component-package.md.
import * as k8s from "@pulumi/kubernetes";
import * as talos from "@fluodata/talos-anywhere";

const local = new talos.DockerCluster("local", {
    cluster: {
        name: "local",
        talosVersion: "v1.13.9",
        // Services of type LoadBalancer get an address of this pool.
        loadBalancer: { pools: [{ name: "local", blocks: ["10.5.0.200-10.5.0.220"] }] },
    },
    docker: { subnet: "10.5.0.0/24" }, // this machine is 10.5.0.1 on the Docker network
    nodes: [
        { name: "cp1", role: "controlplane", ip: "10.5.0.2" },
        { name: "w1", role: "worker", ip: "10.5.0.3" },
    ],
});

// A provider of the program's own @pulumi/kubernetes, from the cluster's
// kubeconfig: the objects a program makes go through it.
const cluster = new k8s.Provider("local", { kubeconfig: local.kubeconfig });
new k8s.core.v1.Namespace("apps", { metadata: { name: "apps" } }, { provider: cluster });

export const kubeconfig = local.kubeconfig;
export const talosconfig = local.talosconfig;
export const localEndpoint = local.localEndpoint;
