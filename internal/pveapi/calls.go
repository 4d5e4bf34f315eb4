package pveapi

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Node is one member of the Proxmox cluster.
type Node struct {
	Node   string `json:"node"`
	Status string `json:"status"` // online, offline, unknown
}

// Storage is a datastore as one node sees it.
type Storage struct {
	Storage string `json:"storage"`
	Content string `json:"content"` // comma-separated: iso,images,...
	Active  int    `json:"active"`
	Enabled int    `json:"enabled"`
}

// HasContent reports whether the storage holds the content type.
func (s Storage) HasContent(ct string) bool {
	for _, c := range strings.Split(s.Content, ",") {
		if strings.TrimSpace(c) == ct {
			return true
		}
	}
	return false
}

// ClusterVM is a VM as /cluster/resources lists it.
type ClusterVM struct {
	VMID   int    `json:"vmid"`
	Name   string `json:"name"`
	Node   string `json:"node"`
	Status string `json:"status"`
	Tags   string `json:"tags"` // ;-separated
}

// VMStatus is /nodes/{node}/qemu/{vmid}/status/current.
type VMStatus struct {
	Status string `json:"status"` // running, stopped
	Name   string `json:"name"`
	Tags   string `json:"tags"`
	Lock   string `json:"lock"`
}

// TagList splits Proxmox's tag string (separated by ; , or space).
func TagList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// TaskStatus is /nodes/{node}/tasks/{upid}/status.
type TaskStatus struct {
	Status     string `json:"status"` // running, stopped
	ExitStatus string `json:"exitstatus"`
}

// Version returns the Proxmox VE version; it proves the token works.
func (c *Client) Version(ctx context.Context) (string, error) {
	var v struct {
		Version string `json:"version"`
		Release string `json:"release"`
	}
	if err := c.call(ctx, "GET", "/version", nil, &v); err != nil {
		return "", err
	}
	return v.Version, nil
}

// Nodes lists the cluster's nodes.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var out []Node
	return out, c.call(ctx, "GET", "/nodes", nil, &out)
}

// Storages lists the datastores a node sees.
func (c *Client) Storages(ctx context.Context, node string) ([]Storage, error) {
	var out []Storage
	return out, c.call(ctx, "GET", "/nodes/"+url.PathEscape(node)+"/storage", nil, &out)
}

// VMs lists every VM of the Proxmox cluster.
func (c *Client) VMs(ctx context.Context) ([]ClusterVM, error) {
	var out []ClusterVM
	return out, c.call(ctx, "GET", "/cluster/resources?type=vm", nil, &out)
}

// Permissions returns the privileges the client's token holds on an ACL
// path ("/vms/110", "/storage/local"), as Proxmox computes them for it
// (GET /access/permissions: the token's own ACLs and, with privilege
// separation off, its user's, inherited from the parents of path).
func (c *Client) Permissions(ctx context.Context, path string) (map[string]bool, error) {
	var out map[string]map[string]int
	if err := c.call(ctx, "GET", "/access/permissions?"+url.Values{"path": {path}}.Encode(), nil, &out); err != nil {
		return nil, fmt.Errorf("unable to read the token's permissions on %s: %w", path, err)
	}
	privs := map[string]bool{}
	for name := range out[path] {
		privs[name] = true
	}
	return privs, nil
}

// URLMetadata is what a Proxmox node learned of a URL it fetched.
type URLMetadata struct {
	Filename string `json:"filename"`
	Mimetype string `json:"mimetype"`
	Size     int64  `json:"size"`
}

// QueryURLMetadata has node fetch the head of rawURL, as its download of
// an ISO does (GET /nodes/{node}/query-url-metadata): an error says the
// node cannot reach it, in the node's words.
func (c *Client) QueryURLMetadata(ctx context.Context, node, rawURL string) (URLMetadata, error) {
	var out URLMetadata
	q := url.Values{"url": {rawURL}, "verify-certificates": {"1"}}
	if err := c.call(ctx, "GET", "/nodes/"+url.PathEscape(node)+"/query-url-metadata?"+q.Encode(), nil, &out); err != nil {
		return out, fmt.Errorf("unable to have %s fetch %s: %w", node, rawURL, err)
	}
	return out, nil
}

// VMStatus returns a VM's current state; ErrNotFound if it does not exist.
func (c *Client) VMStatus(ctx context.Context, node string, vmid int) (VMStatus, error) {
	var out VMStatus
	return out, c.call(ctx, "GET", vmPath(node, vmid)+"/status/current", nil, &out)
}

// OverruleShutdown is the stop parameter that aborts pending guest shutdown
// tasks (qmshutdown) of the VM before stopping it. It came with qemu-server
// 8.1.2 (Proxmox VE 8.2); older versions reject it.
const OverruleShutdown = "overrule-shutdown"

// StopVM hard-stops a VM (no guest shutdown) and returns the task's UPID. It
// overrules a pending graceful shutdown, whose lock would fail a plain stop,
// and sends the stop again without that when Proxmox refuses the parameter
// (docs/decisions/0004-upstream-behaviours.md#stopping-a-vm-that-is-shutting-down).
func (c *Client) StopVM(ctx context.Context, node string, vmid int) (string, error) {
	path := vmPath(node, vmid) + "/status/stop"
	var upid string
	err := c.call(ctx, "POST", path, url.Values{OverruleShutdown: {"1"}}, &upid)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || !apiErr.RejectsParam(OverruleShutdown) {
		return upid, err
	}
	if err := c.call(ctx, "POST", path, url.Values{}, &upid); err != nil {
		return "", fmt.Errorf("unable to stop VM %d without %s (refused: %s): %w", vmid, OverruleShutdown, apiErr.Errors[OverruleShutdown], err)
	}
	return upid, nil
}

// TaskStatus returns a task's state.
func (c *Client) TaskStatus(ctx context.Context, node, upid string) (TaskStatus, error) {
	var out TaskStatus
	return out, c.call(ctx, "GET", "/nodes/"+url.PathEscape(node)+"/tasks/"+url.PathEscape(upid)+"/status", nil, &out)
}

// WaitTask polls a task until it stops; a task that ends without "OK" is an
// error carrying its exit status.
func (c *Client) WaitTask(ctx context.Context, node, upid string, poll time.Duration) error {
	for {
		st, err := c.TaskStatus(ctx, node, upid)
		if err != nil {
			return err
		}
		if st.Status == "stopped" {
			if st.ExitStatus != "OK" {
				return fmt.Errorf("proxmox task %s failed: %s", upid, st.ExitStatus)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unable to wait for Proxmox task %s: %w", upid, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// EjectCDROM empties the VM's CD-ROM drive iface ("ide2"): the drive
// stays, with no medium, so the VM refers to no ISO file that a later
// version could delete. The config update is synchronous (PUT, no task).
// A VM that is gone is ErrNotFound.
func (c *Client) EjectCDROM(ctx context.Context, node string, vmid int, iface string) error {
	if err := c.call(ctx, "PUT", vmPath(node, vmid)+"/config", url.Values{iface: {"none,media=cdrom"}}, nil); err != nil {
		return fmt.Errorf("unable to eject the CD-ROM (%s) of VM %d: %w", iface, vmid, err)
	}
	return nil
}

func vmPath(node string, vmid int) string {
	return fmt.Sprintf("/nodes/%s/qemu/%d", url.PathEscape(node), vmid)
}

// Volume is a volume of a datastore's content.
type Volume struct {
	VolID   string `json:"volid"`
	Content string `json:"content"`
	Size    int64  `json:"size"`
	// VMID is the VM the volume's name says it belongs to (0: none).
	VMID int `json:"vmid"`
}

// StorageContent lists a datastore's volumes of one content type
// ("images", "iso") on a node.
func (c *Client) StorageContent(ctx context.Context, node, storage, content string) ([]Volume, error) {
	var out []Volume
	q := url.Values{"content": {content}}.Encode()
	if err := c.call(ctx, "GET", "/nodes/"+url.PathEscape(node)+"/storage/"+url.PathEscape(storage)+"/content?"+q, nil, &out); err != nil {
		return nil, fmt.Errorf("unable to list the %s of datastore %s on %s: %w", content, storage, node, err)
	}
	return out, nil
}

// VMConfig is a VM's configuration (its drives: "scsi1": "local-zfs:vm-110-disk-1,size=20G").
func (c *Client) VMConfig(ctx context.Context, node string, vmid int) (map[string]any, error) {
	var out map[string]any
	if err := c.call(ctx, "GET", vmPath(node, vmid)+"/config", nil, &out); err != nil {
		return nil, fmt.Errorf("unable to read the configuration of VM %d: %w", vmid, err)
	}
	return out, nil
}

// DeleteVolume deletes a volume ("local-zfs:vm-9999-pvc-..."), and waits
// for the deletion's task.
func (c *Client) DeleteVolume(ctx context.Context, node, volid string, poll time.Duration) error {
	storage, _, ok := strings.Cut(volid, ":")
	if !ok {
		return fmt.Errorf("unable to delete volume %q: not storage:name", volid)
	}
	var upid string
	if err := c.call(ctx, "DELETE", "/nodes/"+url.PathEscape(node)+"/storage/"+url.PathEscape(storage)+"/content/"+url.PathEscape(volid), nil, &upid); err != nil {
		return fmt.Errorf("unable to delete volume %s: %w", volid, err)
	}
	if err := c.WaitTask(ctx, node, upid, poll); err != nil {
		return fmt.Errorf("unable to delete volume %s: %w", volid, err)
	}
	return nil
}
