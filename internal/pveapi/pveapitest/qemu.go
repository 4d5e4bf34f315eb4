package pveapitest

import (
	"crypto/sha1" //nolint:gosec // Proxmox's config digest is a SHA-1, not a security check
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The VM lifecycle as the bpg provider (v0.95, inside proxmoxve v7.13)
// drives it: create, read, update, resize, start, stop and destroy, each
// answered as qemu-server's API (src/PVE/API2/Qemu.pm) answers it. Written
// from qemu-server's create_vm, update_vm, destroy_vm, vm_start and
// resize_vm and from pve-storage's volume allocation; what the fake does
// not model is named where it matters.

var (
	qemuListRe   = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/qemu$`)
	qemuVMRe     = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/qemu/(\d+)/?$`)
	qemuActionRe = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/qemu/(\d+)/(status/start|status/shutdown|status/reboot|resize|pending|agent/network-get-interfaces)$`)
	// newDiskRe is a drive's volume given as "<storage>:<size in GiB>":
	// qemu-server allocates a new volume of that size.
	newDiskRe = regexp.MustCompile(`^([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(?:\.\d+)?)$`)
	// newCloudInitRe is a cloud-init drive's volume given as
	// "<storage>:cloudinit".
	newCloudInitRe = regexp.MustCompile(`^([a-z][a-z0-9\-_.]*[a-z0-9]):cloudinit$`)
	netKeyRe       = regexp.MustCompile(`^net\d+$`)
	diskKeyRe      = regexp.MustCompile(`^(ide|sata|scsi|virtio|efidisk|tpmstate)\d+$`)
	sizeRe         = regexp.MustCompile(`^(\+)?(\d+(?:\.\d+)?)([KMGT])?$`)
)

// numericKeys are the VM config keys whose schema type is integer or
// boolean: qemu-server's config parser (check_type) turns them into
// numbers, so the API's JSON has numbers there; every other key, property
// strings included (memory since PVE 8.1), is a string.
var numericKeys = map[string]bool{
	"cores": true, "sockets": true, "vcpus": true, "cpuunits": true, "onboot": true, "acpi": true,
	"kvm": true, "tablet": true, "template": true, "protection": true, "numa": true, "balloon": true,
	"shares": true, "localtime": true, "reboot": true, "freeze": true, "autostart": true, "tdf": true,
	"migrate_speed": true,
}

// ignoredCreateParams are parameters of create_vm and update_vm that are
// not configuration keys.
var ignoredCreateParams = []string{"vmid", "node", "start", "pool", "storage", "force", "unique", "live-restore", "archive", "bwlimit", "skiplock", "digest", "background_delay", "delete", "revert"}

// AgentAddresses sets the addresses the guest agent of a VM reports once it
// runs (Talos's qemu-guest-agent extension reports the node's address).
// Without it, the agent of that VM is not running, as on a guest without
// the agent.
func (s *Server) AgentAddresses(vmid int, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agentIPs == nil {
		s.agentIPs = map[int][]string{}
	}
	s.agentIPs[vmid] = ips
}

// VM returns a copy of a VM of the fake, or nil.
func (s *Server) VM(vmid int) *VM {
	defer s.lockSettled()()
	vm, ok := s.vms[vmid]
	if !ok {
		return nil
	}
	c := *vm
	c.Config = maps.Clone(vm.Config)
	return &c
}

// VMIDs lists the VMs of the fake, sorted.
func (s *Server) VMIDs() []int {
	defer s.lockSettled()()
	return slices.Sorted(maps.Keys(s.vms))
}

// Calls counts the accepted lifecycle calls by kind (create, start,
// update, resize, destroy, shutdown, reboot) per VM.
func (s *Server) Calls(vmid int) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.vmCalls[vmid])
}

func (s *Server) count(vmid int, kind string) {
	if s.vmCalls == nil {
		s.vmCalls = map[int]map[string]int{}
	}
	if s.vmCalls[vmid] == nil {
		s.vmCalls[vmid] = map[string]int{}
	}
	s.vmCalls[vmid][kind]++
}

// handleQemu answers the VM lifecycle calls; it reports whether the request
// was one.
func (s *Server) handleQemu(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path == "/api2/json/pools" && r.Method == http.MethodGet {
		// The resource pools: the fake has none.
		writeData(w, []any{})
		return true
	}
	if m := match(r, http.MethodPost, qemuListRe); m != nil {
		s.createVM(w, r, m[1])
		return true
	}
	if m := match(r, http.MethodGet, qemuListRe); m != nil {
		out := []map[string]any{}
		for _, vmid := range slices.Sorted(maps.Keys(s.vms)) {
			if vm := s.vms[vmid]; vm.Node == m[1] {
				out = append(out, map[string]any{"vmid": vmid, "name": vm.Name, "status": runState(vm), "tags": vm.Tags})
			}
		}
		writeData(w, out)
		return true
	}
	if m := match(r, http.MethodDelete, qemuVMRe); m != nil {
		s.destroyVM(w, r, m[1], m[2])
		return true
	}
	if m := qemuActionRe.FindStringSubmatch(r.URL.Path); m != nil {
		vmid, _ := strconv.Atoi(m[2])
		vm, ok := s.vmOn(w, m[1], vmid, http.StatusInternalServerError)
		if !ok {
			return true
		}
		switch {
		case m[3] == "status/start" && r.Method == http.MethodPost:
			s.startVM(w, vmid, vm)
		case m[3] == "status/shutdown" && r.Method == http.MethodPost:
			s.count(vmid, "shutdown")
			t := &task{done: time.Now().Add(s.TaskLatency), apply: func() { vm.Running = false }}
			writeData(w, s.newTask(vm.Node, "qmshutdown", strconv.Itoa(vmid), t))
		case m[3] == "status/reboot" && r.Method == http.MethodPost:
			s.count(vmid, "reboot")
			if !vm.Running {
				writeErr(w, http.StatusInternalServerError, fmt.Sprintf("VM %d not running", vmid))
				return true
			}
			writeData(w, s.newTask(vm.Node, "qmreboot", strconv.Itoa(vmid), &task{done: time.Now().Add(s.TaskLatency)}))
		case m[3] == "resize" && r.Method == http.MethodPut:
			s.resizeVM(w, r, vmid, vm)
		case m[3] == "pending" && r.Method == http.MethodGet:
			var out []map[string]any
			for _, k := range slices.Sorted(maps.Keys(vm.Config)) {
				out = append(out, map[string]any{"key": k, "value": configValue(k, vm.Config[k])})
			}
			writeData(w, out)
		case m[3] == "agent/network-get-interfaces" && r.Method == http.MethodGet:
			s.agentInterfaces(w, vmid, vm)
		default:
			writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
		}
		return true
	}
	if m := match(r, http.MethodPost, configRe); m != nil {
		// The asynchronous config update: the same change, as a task.
		vmid, _ := strconv.Atoi(m[2])
		vm, ok := s.vmOn(w, m[1], vmid, http.StatusInternalServerError)
		if !ok {
			return true
		}
		if errs := s.updateConfig(vmid, vm, r.PostForm); len(errs) > 0 {
			writeParamErr(w, errs)
			return true
		}
		writeData(w, s.newTask(vm.Node, "qmconfig", strconv.Itoa(vmid), &task{}))
		return true
	}
	return false
}

func runState(vm *VM) string {
	if vm.Running {
		return "running"
	}
	return "stopped"
}

// createVM is create_vm: the VM id must be free on the whole cluster, the
// drives given as "<storage>:<size>" get new volumes, and the VM exists
// (stopped) once the qmcreate task ends.
func (s *Server) createVM(w http.ResponseWriter, r *http.Request, node string) {
	vmid, err := strconv.Atoi(r.PostForm.Get("vmid"))
	if err != nil || vmid < 100 {
		writeParamErr(w, map[string]string{"vmid": "value must have a minimum value of 100"})
		return
	}
	if _, exists := s.vms[vmid]; exists || s.creating[vmid] {
		// PVE::Cluster::check_vmid_unused
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("VM %d already exists", vmid))
		return
	}
	vm := &VM{Node: node, Config: map[string]string{}}
	if errs := s.applyParams(vmid, vm, r.PostForm, false); len(errs) > 0 {
		writeParamErr(w, errs)
		return
	}
	// What qemu-server adds on its own: a SMBIOS UUID, the VM generation
	// id and the creation metadata.
	vm.Config["smbios1"] = "uuid=" + fakeUUID(vmid, "smbios")
	vm.Config["vmgenid"] = fakeUUID(vmid, "vmgenid")
	vm.Config["meta"] = fmt.Sprintf("creation-qemu=9.2.0,ctime=%d", time.Now().Unix())
	vm.Name, vm.Tags = vm.Config["name"], vm.Config["tags"]
	if s.creating == nil {
		s.creating = map[int]bool{}
	}
	s.creating[vmid] = true
	s.count(vmid, "create")
	start, _ := parseBool(r.PostForm.Get("start"))
	t := &task{done: time.Now().Add(s.TaskLatency), apply: func() {
		delete(s.creating, vmid)
		s.vms[vmid] = vm
		vm.Running = start
		if start {
			s.boot(vmid, vm)
		}
	}}
	writeData(w, s.newTask(node, "qmcreate", strconv.Itoa(vmid), t))
}

// applyParams sets a VM's configuration from create or update parameters:
// new drives are allocated, "delete" removes keys, tags are stored as
// Proxmox stores them (sorted, ";"-separated, lowercase).
func (s *Server) applyParams(vmid int, vm *VM, form url.Values, update bool) map[string]string {
	errs := map[string]string{}
	for _, k := range slices.SortedFunc(maps.Keys(form), driveOrder) {
		if slices.Contains(ignoredCreateParams, k) {
			continue
		}
		v := form[k][0]
		switch {
		case k == "tags":
			tags := strings.FieldsFunc(strings.ToLower(v), func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
			slices.Sort(tags)
			v = strings.Join(slices.Compact(tags), ";")
		case netKeyRe.MatchString(k):
			v = printNet(v)
		case diskKeyRe.MatchString(k):
			alloc, err := s.allocDrive(vmid, vm, k, v)
			if err != nil {
				errs[k] = err.Error()
				continue
			}
			v = alloc
		}
		vm.Config[k] = v
	}
	if update {
		for _, k := range strings.FieldsFunc(form.Get("delete"), func(r rune) bool { return r == ',' || r == ';' }) {
			if old, ok := vm.Config[k]; ok && diskKeyRe.MatchString(k) {
				// A removed disk becomes an unused volume, as on Proxmox.
				if vol, _, _ := strings.Cut(old, ","); !strings.Contains(old, "media=cdrom") {
					vm.Config[s.nextUnused(vm)] = vol
				}
			}
			delete(vm.Config, k)
		}
	}
	return errs
}

// driveOrder sorts config keys as qemu-server walks a VM's drives
// (foreach_volume over valid_drive_names: ide, sata, scsi, virtio by index,
// then efidisk0 and tpmstate0), so the volumes are numbered as Proxmox
// numbers them; other keys after them.
func driveOrder(a, b string) int {
	rank := func(k string) (int, int) {
		m := diskKeyRe.FindStringSubmatch(k)
		if m == nil {
			return 99, 0
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(k, m[1]))
		return slices.Index([]string{"ide", "sata", "scsi", "virtio", "efidisk", "tpmstate"}, m[1]), n
	}
	ra, na := rank(a)
	rb, nb := rank(b)
	if ra != rb {
		return ra - rb
	}
	if na != nb {
		return na - nb
	}
	return strings.Compare(a, b)
}

// allocDrive is create_disks for one drive: "<storage>:<size in GiB>"
// gets a new volume, "<storage>:cloudinit" the cloud-init volume; the
// drive is stored as print_drive prints it (the volume first, the other
// options sorted, the size formatted, the format dropped once allocated).
func (s *Server) allocDrive(vmid int, vm *VM, key, value string) (string, error) {
	file, opts := parsePropString(value, "file")
	if file == "" || file == "none" || file == "cdrom" {
		delete(opts, "size")
		return printPropString(file, opts), nil
	}
	if m := newCloudInitRe.FindStringSubmatch(file); m != nil {
		file = fmt.Sprintf("%s:vm-%d-cloudinit", m[1], vmid)
		s.put(vm.Node, file, 4<<20)
		opts["media"] = "cdrom"
		delete(opts, "format")
		return printPropString(file, opts), nil
	}
	m := newDiskRe.FindStringSubmatch(file)
	if m == nil {
		// An existing volume (the ISO of a CD-ROM): kept as given.
		if sz, ok := opts["size"]; ok {
			if n, err := strconv.ParseInt(sz, 10, 64); err == nil {
				opts["size"] = formatSize(n)
			}
		}
		return printPropString(file, opts), nil
	}
	gib, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return "", fmt.Errorf("invalid size '%s'", m[2])
	}
	bytes := int64(gib * (1 << 30))
	if strings.HasPrefix(key, "tpmstate") {
		// The TPM state's size is fixed, whatever was asked
		// (qemu-server src/PVE/QemuServer/Drive.pm, TPMSTATE_DISK_SIZE).
		bytes = 4 << 20
	}
	if strings.HasPrefix(key, "efidisk") {
		// create_efidisk: the size of the OVMF vars template (528K for
		// efitype=4m), rounded up to the 4 MiB extents of a datastore
		// without a path (LVM), as volume_size_info then reports it.
		bytes = 528 << 10
		if ds := s.datastores[m[1]]; ds.Path == "" {
			bytes = 4 << 20
		}
	}
	file = fmt.Sprintf("%s:vm-%d-disk-%d", m[1], vmid, s.nextDisk(vm.Node, m[1], vmid))
	s.put(vm.Node, file, bytes)
	opts["size"] = formatSize(bytes)
	delete(opts, "format")
	return printPropString(file, opts), nil
}

// parsePropString splits a property string into its default key's value
// (given bare or as "<defaultKey>=...") and its other options.
func parsePropString(v, defaultKey string) (string, map[string]string) {
	def, opts := "", map[string]string{}
	for part := range strings.SplitSeq(v, ",") {
		if part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		switch {
		case !ok:
			def = part
		case k == defaultKey:
			def = val
		default:
			opts[k] = val
		}
	}
	return def, opts
}

// printPropString is pve-common's print_property_string: the default key's
// value first, then the options sorted by name.
func printPropString(def string, opts map[string]string) string {
	parts := []string{}
	if def != "" {
		parts = append(parts, def)
	}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		parts = append(parts, k+"="+opts[k])
	}
	return strings.Join(parts, ",")
}

// printNet is qemu-server's parse_net then print_net: the model combined
// with the MAC as "<model>=<mac>" first, the other options sorted.
func printNet(v string) string {
	_, opts := parsePropString(v, "")
	model, mac := opts["model"], opts["macaddr"]
	for _, nic := range []string{"virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"} {
		if m, ok := opts[nic]; ok {
			model, mac = nic, m
			delete(opts, nic)
		}
	}
	delete(opts, "model")
	delete(opts, "macaddr")
	return printPropString(model+"="+mac, opts)
}

// nextDisk is the first free disk number of a VM on a datastore.
func (s *Server) nextDisk(node, store string, vmid int) int {
	for n := 0; ; n++ {
		if _, used := s.files[node][fmt.Sprintf("%s:vm-%d-disk-%d", store, vmid, n)]; !used {
			return n
		}
	}
}

func (s *Server) nextUnused(vm *VM) string {
	for n := 0; ; n++ {
		if _, used := vm.Config[fmt.Sprintf("unused%d", n)]; !used {
			return fmt.Sprintf("unused%d", n)
		}
	}
}

// fakeUUID is a stable UUID-shaped id per VM and purpose.
func fakeUUID(vmid int, purpose string) string {
	sum := sha1.Sum([]byte(fmt.Sprintf("%d/%s", vmid, purpose))) //nolint:gosec // an id, not a security check
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// startVM is vm_start: a qmstart task; starting a running VM fails with
// "already running", which the provider takes as success.
func (s *Server) startVM(w http.ResponseWriter, vmid int, vm *VM) {
	if s.Forbidden {
		writeErr(w, http.StatusForbidden, fmt.Sprintf("Permission check failed (/vms/%d, VM.PowerMgmt)", vmid))
		return
	}
	if vm.Running {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("VM %d already running", vmid))
		return
	}
	s.count(vmid, "start")
	t := &task{done: time.Now().Add(s.TaskLatency), apply: func() {
		vm.Running = true
		s.boot(vmid, vm)
	}}
	writeData(w, s.newTask(vm.Node, "qmstart", strconv.Itoa(vmid), t))
}

// boot hands a VM that starts to OnBoot, once the task's lock is released
// (called under it).
func (s *Server) boot(vmid int, vm *VM) {
	if s.OnBoot == nil {
		return
	}
	onBoot, config := s.OnBoot, maps.Clone(vm.Config)
	s.afterUnlock = append(s.afterUnlock, func() { onBoot(vmid, config) })
}

// destroyVM is destroy_vm: refused while the VM runs; its disks (and,
// with destroy-unreferenced-disks, every volume named for it) are freed
// and the ACL entries on its path removed, always
// (PVE::AccessControl::remove_vm_access in qemu-server's
// API2/Qemu.pm destroy_vm; purge also takes it out of replication, backup
// jobs and HA, which the fake does not model).
func (s *Server) destroyVM(w http.ResponseWriter, r *http.Request, node, id string) {
	vmid, _ := strconv.Atoi(id)
	vm, ok := s.vmOn(w, node, vmid, http.StatusInternalServerError)
	if !ok {
		return
	}
	if vm.Running {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("VM %d is running - destroy failed", vmid))
		return
	}
	s.count(vmid, "destroy")
	unreferenced, _ := parseBool(r.Form.Get("destroy-unreferenced-disks"))
	t := &task{done: time.Now().Add(s.TaskLatency), apply: func() {
		for volid := range s.files[node] {
			_, volname, _ := strings.Cut(volid, ":")
			if m := imageVolnameRe.FindStringSubmatch(volname); m != nil && m[1] == id && (unreferenced || referenced(vm, volid)) {
				delete(s.files[node], volid)
			}
		}
		delete(s.vms, vmid)
		vmPath := "/vms/" + id
		maps.DeleteFunc(s.acls, func(a ACL, _ bool) bool { return a.Path == vmPath })
		if s.OnDestroy != nil {
			// Called under the lock the task runs with, released first.
			onDestroy := s.OnDestroy
			s.afterUnlock = append(s.afterUnlock, func() { onDestroy(vmid) })
		}
	}}
	writeData(w, s.newTask(node, "qmdestroy", id, t))
}

func referenced(vm *VM, volid string) bool {
	for _, v := range vm.Config {
		if vol, _, _ := strings.Cut(v, ","); vol == volid {
			return true
		}
	}
	return false
}

// resizeVM is resize_vm: the size is absolute or "+"-relative, and never
// smaller than the disk ("shrinking disks is not supported"); the task
// grows the volume and the drive's size option.
func (s *Server) resizeVM(w http.ResponseWriter, r *http.Request, vmid int, vm *VM) {
	disk := r.PostForm.Get("disk")
	drive, ok := vm.Config[disk]
	if !ok {
		writeErr(w, http.StatusInternalServerError, fmt.Sprintf("disk '%s' does not exist", disk))
		return
	}
	m := sizeRe.FindStringSubmatch(r.PostForm.Get("size"))
	if m == nil {
		writeParamErr(w, map[string]string{"size": "value does not match the regex pattern"})
		return
	}
	volid, _, _ := strings.Cut(drive, ",")
	cur := s.files[vm.Node][volid]
	n, _ := strconv.ParseFloat(m[2], 64)
	unit := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[3]]
	want := int64(n * unit)
	if m[1] == "+" {
		want += cur
	}
	if want < cur {
		writeErr(w, http.StatusInternalServerError, "shrinking disks is not supported")
		return
	}
	s.count(vmid, "resize")
	t := &task{done: time.Now().Add(s.TaskLatency), apply: func() {
		s.put(vm.Node, volid, want)
		_, opts := parsePropString(drive, "file")
		opts["size"] = formatSize(want)
		vm.Config[disk] = printPropString(volid, opts)
	}}
	writeData(w, s.newTask(vm.Node, "resize", strconv.Itoa(vmid), t))
}

// formatSize is PVE::JSONSchema::format_size.
func formatSize(b int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if b%u.size == 0 {
			return strconv.FormatInt(b/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}

// updateConfig is update_vm (PUT is synchronous, POST a task): each
// parameter replaces its key; "delete" removes keys.
func (s *Server) updateConfig(vmid int, vm *VM, form url.Values) map[string]string {
	if vm.Config == nil {
		vm.Config = map[string]string{}
	}
	s.count(vmid, "update")
	s.configs[vmid] = append(s.configs[vmid], form)
	errs := s.applyParams(vmid, vm, form, true)
	vm.Name, vm.Tags = vm.Config["name"], vm.Config["tags"]
	return errs
}

// agentInterfaces is the guest agent's network-get-interfaces through
// Proxmox: 500 "QEMU guest agent is not running" unless the VM runs and
// its agent was given addresses.
func (s *Server) agentInterfaces(w http.ResponseWriter, vmid int, vm *VM) {
	ips, ok := s.agentIPs[vmid]
	if !vm.Running || !ok {
		writeErr(w, http.StatusInternalServerError, "QEMU guest agent is not running")
		return
	}
	mac := ""
	if net0 := vm.Config["net0"]; net0 != "" {
		_, after, _ := strings.Cut(strings.Split(net0, ",")[0], "=")
		mac = strings.ToLower(after)
	}
	var addrs []map[string]any
	for _, ip := range ips {
		addrs = append(addrs, map[string]any{"ip-address": ip, "ip-address-type": "ipv4", "prefix": 24})
	}
	writeData(w, map[string]any{"result": []map[string]any{
		{"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": []map[string]any{{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}}},
		{"name": "eth0", "hardware-address": mac, "ip-addresses": addrs},
	}})
}

// configValue is a config key's value as the API's JSON has it.
func configValue(key, value string) any {
	if numericKeys[key] {
		if n, err := strconv.ParseInt(value, 10, 64); err == nil {
			return n
		}
		if b, err := parseBool(value); err == nil {
			if b {
				return 1
			}
			return 0
		}
	}
	return value
}

// configJSON is a VM's configuration as GET .../config answers it, with
// the digest of the config file.
func configJSON(vm *VM) map[string]any {
	out := map[string]any{}
	h := sha1.New() //nolint:gosec // Proxmox's digest
	for _, k := range slices.Sorted(maps.Keys(vm.Config)) {
		out[k] = configValue(k, vm.Config[k])
		_, _ = fmt.Fprintf(h, "%s: %s\n", k, vm.Config[k])
	}
	out["digest"] = hex.EncodeToString(h.Sum(nil))
	return out
}
