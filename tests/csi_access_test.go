package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/internal/pveapi/pveapitest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// accessModel replays what the proxmoxve provider asks of the Proxmox API
// for the CSI plugin's access resources, as bpg's resources do it:
// role POST /access/roles (roleid, privs) and DELETE /access/roles/{id};
// user POST /access/users (userid) and DELETE /access/users/{id}; ACL
// PUT /access/acl (path, roles, users, propagate; delete=1 removes);
// token POST and DELETE /access/users/{id}/token/{name}. The engine's part
// is modelled as far as it matters here: a resource in the state with the
// same inputs is left alone, one no longer registered is deleted
// (dependents first), except when its DeletedWith resource goes too.
type accessModel struct {
	t     *testing.T
	pve   *pveapitest.Server
	state map[string]componentstest.Registered // by URN, with their order
	order []string
	calls int
}

var accessTypes = []string{tRole, tUser, tACL, tToken}

func (m *accessModel) call(method, path string, form url.Values) {
	m.t.Helper()
	m.calls++
	req, err := http.NewRequest(method, m.pve.URL+"/api2/json"+path, strings.NewReader(form.Encode()))
	require.NoError(m.t, err)
	req.Header.Set("Authorization", "PVEAPIToken="+pveapitest.TokenID+"="+pveapitest.TokenSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := m.pve.Client().Do(req)
	require.NoError(m.t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(m.t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, body)
}

func str(r componentstest.Registered, key resource.PropertyKey) string {
	return r.Inputs[key].StringValue()
}

func (m *accessModel) create(r componentstest.Registered) {
	switch r.Type {
	case tRole:
		var privs []string
		for _, p := range r.Inputs["privileges"].ArrayValue() {
			privs = append(privs, p.StringValue())
		}
		m.call(http.MethodPost, "/access/roles", url.Values{"roleid": {str(r, "roleId")}, "privs": {strings.Join(privs, ",")}})
	case tUser:
		m.call(http.MethodPost, "/access/users", url.Values{"userid": {str(r, "userId")}})
	case tACL:
		m.call(http.MethodPut, "/access/acl", url.Values{"path": {str(r, "path")}, "roles": {str(r, "roleId")}, "users": {str(r, "userId")},
			"propagate": {fmt.Sprint(map[bool]int{true: 1}[r.Inputs["propagate"].BoolValue()])}})
	case tToken:
		m.call(http.MethodPost, "/access/users/"+url.PathEscape(str(r, "userId"))+"/token/"+str(r, "tokenName"),
			url.Values{"privsep": {fmt.Sprint(map[bool]int{true: 1}[r.Inputs["privilegesSeparation"].BoolValue()])}})
	}
}

func (m *accessModel) delete(r componentstest.Registered) {
	switch r.Type {
	case tRole:
		m.call(http.MethodDelete, "/access/roles/"+str(r, "roleId"), nil)
	case tUser:
		m.call(http.MethodDelete, "/access/users/"+url.PathEscape(str(r, "userId")), nil)
	case tACL:
		m.call(http.MethodPut, "/access/acl", url.Values{"path": {str(r, "path")}, "roles": {str(r, "roleId")}, "users": {str(r, "userId")}, "delete": {"1"}})
	case tToken:
		m.call(http.MethodDelete, "/access/users/"+url.PathEscape(str(r, "userId"))+"/token/"+str(r, "tokenName"), nil)
	}
}

// aclEntries are a user resource's acls input: {path, propagate, roleId}.
func aclEntries(r componentstest.Registered) [][3]string {
	var out [][3]string
	if v, ok := r.Inputs["acls"]; ok {
		for _, e := range v.ArrayValue() {
			o := e.ObjectValue()
			out = append(out, [3]string{o["path"].StringValue(), fmt.Sprint(o["propagate"].BoolValue()), o["roleId"].StringValue()})
		}
	}
	return out
}

// updateUser is bpg v0.95's userUpdate (proxmoxtf/resource/user.go): PUT
// the user's fields, then every ACL entry of the old acl set deleted and
// every one of the new set added, whatever changed.
func (m *accessModel) updateUser(old, r componentstest.Registered) {
	m.call(http.MethodPut, "/access/users/"+url.PathEscape(str(r, "userId")), url.Values{"comment": {str(r, "comment")}})
	for _, e := range aclEntries(old) {
		m.call(http.MethodPut, "/access/acl", url.Values{"path": {e[0]}, "roles": {e[2]}, "users": {str(r, "userId")}, "delete": {"1"}})
	}
	for _, e := range aclEntries(r) {
		m.call(http.MethodPut, "/access/acl", url.Values{"path": {e[0]}, "roles": {e[2]}, "users": {str(r, "userId")}})
	}
}

// refresh is `pulumi refresh` of the user: bpg v0.95's userRead sets its
// acl attribute to every ACL entry of the user that Proxmox lists (the Acl
// resources' too), and the bridge's refresh writes it to the state's
// inputs (bpg issue 2866, fixed in v0.107).
func (m *accessModel) refresh() {
	_, _, _, acls := m.pve.Access()
	for urn, r := range m.state {
		if r.Type != tUser {
			continue
		}
		var entries []resource.PropertyValue
		for _, a := range acls {
			if a.User == str(r, "userId") {
				entries = append(entries, resource.NewObjectProperty(resource.PropertyMap{
					"path": resource.NewStringProperty(a.Path), "propagate": resource.NewBoolProperty(a.Propagate),
					"roleId": resource.NewStringProperty(a.Role),
				}))
			}
		}
		r.Inputs = r.Inputs.Copy()
		r.Inputs["acls"] = resource.NewArrayProperty(entries)
		m.state[urn] = r
	}
}

// up registers the program for src and makes the model's calls; it
// returns how many calls it made.
func (m *accessModel) up(src stacks.Source) int {
	m.t.Helper()
	e, _, _, err := programtest.Run(m.t, src, "proxmox-homelab", program.Options{})
	require.NoError(m.t, err)
	before := m.calls
	seen := map[string]bool{}
	for _, r := range e.Created() {
		if !slices.Contains(accessTypes, r.Type) {
			continue
		}
		seen[r.URN] = true
		old, exists := m.state[r.URN]
		if exists {
			// The engine's ignoreChanges: the ignored inputs are the
			// state's, not the program's.
			r.Inputs = r.Inputs.Copy()
			for _, p := range r.IgnoreChanges {
				if v, ok := old.Inputs[resource.PropertyKey(p)]; ok {
					r.Inputs[resource.PropertyKey(p)] = v
				} else {
					delete(r.Inputs, resource.PropertyKey(p))
				}
			}
		}
		switch {
		case exists && fmt.Sprint(old.Inputs) == fmt.Sprint(r.Inputs):
			continue
		case exists && r.Type == tUser:
			m.updateUser(old, r)
		default:
			m.create(r)
		}
		if _, ok := m.state[r.URN]; !ok {
			m.order = append(m.order, r.URN)
		}
		m.state[r.URN] = r
	}
	m.deleteExcept(seen, nil)
	return m.calls - before
}

// deleteExcept deletes, dependents first, what is in the state and not
// kept; gone are the resources deleted besides (the VMs), whose
// DeletedWith dependents need no call.
func (m *accessModel) deleteExcept(keep, gone map[string]bool) {
	for i := len(m.order) - 1; i >= 0; i-- {
		urn := m.order[i]
		if keep[urn] {
			continue
		}
		r := m.state[urn]
		if !gone[r.DeletedWith] {
			m.delete(r)
		}
		delete(m.state, urn)
		m.order = slices.Delete(m.order, i, i+1)
	}
}

// The CSI plugin's access through a stack's life, against the Proxmox API
// fake, which drops a destroyed VM's ACL entries and a deleted user's
// tokens as Proxmox does: the first `up` makes the role, user, ACLs and
// token; a second one changes nothing; a node added adds its VM's ACL;
// the destroy leaves nothing behind, and no call fails on something
// already gone.
func TestTheCSIPluginsAccessThroughAStacksLife(t *testing.T) {
	t.Parallel()
	vms := map[int]*pveapitest.VM{}
	src := withCSI(t, map[string]any{"datastore": "local-zfs"})
	cfg, d := stacks.Load(src)
	require.NoError(t, d.Err())
	for _, ref := range cfg.Nodes.Refs() {
		vms[ref.VMID] = &pveapitest.VM{Node: ref.ProxmoxNode, Name: ref.Name}
	}
	m := &accessModel{t: t, pve: pveapitest.New(t, vms), state: map[string]componentstest.Registered{}}

	require.Equal(t, 7, m.up(src), "role, user, token, and the ACLs of the datastore and 3 VMs")
	roles, users, tokens, acls := m.pve.Access()
	assert.Equal(t, map[string][]string{"homelab-csi": {"VM.Audit", "VM.Config.Disk", "Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.Audit"}}, roles)
	assert.Equal(t, []string{"homelab-csi@pve"}, users)
	assert.Equal(t, []string{"homelab-csi@pve!csi"}, tokens)
	var paths []string
	for _, a := range acls {
		assert.Equal(t, pveapitest.ACL{Path: a.Path, Role: "homelab-csi", User: "homelab-csi@pve"}, a, "no propagation")
		paths = append(paths, a.Path)
	}
	assert.Equal(t, []string{"/storage/local-zfs", "/vms/110", "/vms/120", "/vms/121"}, paths)

	assert.Zero(t, m.up(src), "a second up changes nothing")

	// make refresh, then up (issue 35, item C.9): bpg v0.95 reads the
	// user's ACL entries into its acl attribute, and the next up's update
	// of the user deleted them all (the program gives none); the Acl
	// resources then flip-flopped. The user ignores changes to them.
	m.refresh()
	assert.Zero(t, m.up(src), "an up after a refresh changes nothing")
	_, _, _, acls = m.pve.Access()
	assert.Len(t, acls, 4, "the CSI user keeps its grants after a refresh and an up")

	added := stackstest.EditSection(t, src, "nodes", func(n map[string]any) {
		n["workers"] = append(n["workers"].([]any), map[string]any{"name": "worker-2", "ip": "10.10.0.22", "vmId": 122})
	})
	vms[122] = &pveapitest.VM{Node: "pve", Name: "worker-2"}
	assert.Equal(t, 1, m.up(added), "the new VM's ACL")
	_, _, _, acls = m.pve.Access()
	assert.Len(t, acls, 5)

	// The destroy: the VMs go (Proxmox drops their ACL entries), then the
	// rest, dependents first.
	gone := map[string]bool{}
	for _, r := range m.state {
		if r.Type == tACL && strings.HasPrefix(str(r, "path"), "/vms/") {
			gone[r.DeletedWith] = true
		}
	}
	for vmid := range vms {
		m.pve.DeleteVM(vmid)
	}
	m.deleteExcept(nil, gone)
	roles, users, tokens, acls = m.pve.Access()
	assert.Empty(t, roles)
	assert.Empty(t, users)
	assert.Empty(t, tokens)
	assert.Empty(t, acls)
}
