// The cluster of ../../Pulumi.proxmox-homelab.yaml.example (one control plane,
// two workers, dnsmasq reservations on the host) in TypeScript, with the
// talos-anywhere package's generated SDK (`pulumi install` makes it from
// ../../provider). Inputs: docs/component-package.md.
import * as pulumi from "@pulumi/pulumi";
import * as k8s from "@pulumi/kubernetes";
import * as talos from "@fluodata/talos-anywhere";

const config = new pulumi.Config();

const vm = (name: string, role: talos.types.enums.Role, ip: string, vmId: number, cores: number, memory: number, dataDiskSize?: number) =>
    ({ name, role, ip, proxmoxNode: "pve", vmId, cores, memory, diskSize: 20, dataDiskSize });

const homelab = new talos.ProxmoxCluster("homelab", {
    cluster: {
        name: "homelab",
        talosVersion: "v1.13.9",
        vip: "10.10.0.5", // the Kubernetes endpoint
        nameservers: ["10.10.0.1"],
        patches: { all: ["machine:\n    time:\n        servers:\n            - time.cloudflare.com\n"] },
    },
    schematic: {
        extensions: ["siderolabs/qemu-guest-agent", "siderolabs/iscsi-tools", "siderolabs/util-linux-tools"],
    },
    proxmox: {
        endpoint: "https://192.168.122.70:8006/",
        apiTokenId: "root@pam!pulumi",
        apiTokenSecret: config.requireSecret("proxmoxApiTokenSecret"),
        // The rest takes the package's defaults: datastores local-lvm and
        // local, cpuType host, seabios, dhcp-reservation addressing.
        bridge: "vmbr1",
        dnsmasq: {
            // The paths and restart command of Debian's dnsmasq, SSH as root
            // on port 22, by default. The host's key line, as
            // `ssh-keyscan -t ed25519 192.168.122.70` prints it.
            ssh: { host: "192.168.122.70", hostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINa7eG/pBlvgisjquRHxcNSZhmgYkxhl3ScZ5sP47kKX" },
        },
    },
    nodes: [
        vm("cp-0", "controlplane", "10.10.0.10", 110, 2, 4096),
        vm("worker-0", "worker", "10.10.0.20", 120, 4, 8192, 20),
        vm("worker-1", "worker", "10.10.0.21", 121, 4, 8192, 20),
    ],
});

// A provider of the program's own @pulumi/kubernetes, from the cluster's
// kubeconfig: the objects a program makes go through it.
const cluster = new k8s.Provider("homelab", { kubeconfig: homelab.kubeconfig });
new k8s.core.v1.Namespace("apps", { metadata: { name: "apps" } }, { provider: cluster });

export const kubeconfig = homelab.kubeconfig;
export const talosconfig = homelab.talosconfig;
export const endpoint = homelab.endpoint;
export const nodeIps = homelab.nodeIps;
