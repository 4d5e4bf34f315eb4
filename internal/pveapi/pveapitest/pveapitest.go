// Package pveapitest is an httptest Proxmox VE API that behaves like the real
// one for the calls this project, and the provider around it, make:
// API-token authentication, VM status, a hard stop that returns a task id
// (UPID) and finishes after a configurable latency, task status polling, 404
// for unknown VMs, bursts of 500s, the lock error a VM busy with another task
// gives, and the storage calls of the provider's download_file resource
// (storage.go).
//
// Where it answers an error, it answers the way Proxmox's own code does
// (pve-http-server, pve-common's JSONSchema, qemu-server, pve-storage): a
// parameter the method's schema lacks or refuses is a 400 "Parameter
// verification failed." with the reason per parameter under "errors", before
// any task starts; a failure inside a task is the task's exit status.
package pveapitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The API token the fake accepts: a fixture, not a credential.
const (
	TokenID     = "root@pam!pulumi"                      //nolint:gosec // test fixture
	TokenSecret = "0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47" //nolint:gosec // test fixture
)

// VM is one fake VM.
type VM struct {
	Node, Name, Tags string
	Running          bool
	// Locked: a task other than a guest shutdown (a backup, a migration)
	// holds the VM's lock, so every stop task fails with the lock timeout,
	// overrule-shutdown or not.
	Locked bool
	// ShutdownPending: a graceful shutdown task (qmshutdown) that the guest
	// ignores holds the VM's lock. A stop task fails with the lock timeout,
	// as on Proxmox after 10 s, unless the stop carries overrule-shutdown=1,
	// which aborts the shutdown task first.
	ShutdownPending bool
	// HA: the VM is HA-managed; Proxmox refuses overrule-shutdown for it.
	HA bool
	// Config is the VM's configuration as PUT .../config sets it
	// ("ide2": "local:iso/talos.iso,media=cdrom").
	Config map[string]string
}

// Server is the fake API.
type Server struct {
	*httptest.Server
	// down is SetDown's.
	down atomic.Bool
	// TaskLatency is how long a stop or download task runs.
	TaskLatency time.Duration
	// Fail500 answers the next n requests with 500.
	Fail500 int
	// Forbidden answers every stop and config update with 403 (a token
	// without VM.PowerMgmt or VM.Config.CDROM).
	Forbidden bool
	// ACLs are the token's privileges by ACL path, inherited by the
	// paths below (every privilege on "/" when nil), as
	// /access/permissions reports them.
	ACLs map[string][]string
	// Unreachable are the hosts a node cannot fetch a URL from
	// (query-url-metadata answers as Proxmox does when the connection
	// fails).
	Unreachable []string
	// Web is how the nodes reach URLs not registered with Serve (e.g. a
	// client of an Image Factory fake); nil: only those exist.
	Web *http.Client
	// OldPVE makes the fake a Proxmox VE before 8.2 (qemu-server before
	// 8.1.2), whose stop has no overrule-shutdown parameter: like every
	// method whose schema forbids additional properties, it refuses it.
	OldPVE bool
	// OnDestroy is called with a VM's id once its destroy task has run
	// (its disks freed), without the fake's lock: a test's machine behind
	// the VM goes with it.
	OnDestroy func(vmid int)
	// OnBoot is called with a VM's id and configuration each time it
	// starts (a create with start, or a start), without the fake's lock:
	// a test's machine behind the VM boots with what the VM has (its
	// firmware, its TPM, its ISO).
	OnBoot func(vmid int, config map[string]string)

	mu        sync.Mutex
	vms       map[int]*VM
	tasks     map[string]*task
	stopCalls map[int]int
	stopForms map[int][]url.Values
	configs   map[int][]url.Values
	seq       int
	agentIPs  map[int][]string
	// afterUnlock are the calls settled tasks left for after the lock.
	afterUnlock []func()
	vmCalls     map[int]map[string]int
	creating    map[int]bool
	storage
	access
}

// task is a Proxmox worker: it runs until done, then either fails with
// failMsg as its exit status or applies its effect once.
type task struct {
	done    time.Time
	failMsg string
	exit    string // exit status on success; "OK" when empty
	apply   func()
	applied bool
}

// New starts a fake with the given VMs by id and the datastore "local" (a
// directory allowing ISOs, like a fresh Proxmox install) on every node.
func New(t testing.TB, vms map[int]*VM) *Server {
	t.Helper()
	return start(t, vms, nil, nil)
}

// NewAt is New on a given address (host:port), as a stack file's
// proxmox.endpoint names the host (https://10.77.0.2:8006/), with a
// self-signed certificate for that host (Certificate), which a client
// that trusts it verifies, as a host with a private CA's certificate.
func NewAt(t testing.TB, vms map[int]*VM, addr string) *Server {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil || net.ParseIP(host) == nil {
		t.Fatalf("pveapitest: %q is not an IP address and port", addr)
	}
	cert, err := selfSigned(net.ParseIP(host))
	if err != nil {
		t.Fatalf("pveapitest: unable to make a certificate for %s: %v", host, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("pveapitest: unable to listen on %s: %v", addr, err)
	}
	return start(t, vms, l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

// selfSigned is a self-signed serving certificate for ip.
func selfSigned(ip net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pvefake " + ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{ip}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// start starts the fake on l with tlsConfig, or on a loopback port with
// httptest's certificate when l is nil.
func start(t testing.TB, vms map[int]*VM, l net.Listener, tlsConfig *tls.Config) *Server {
	t.Helper()
	s := &Server{
		vms: vms, tasks: map[string]*task{}, stopCalls: map[int]int{}, stopForms: map[int][]url.Values{},
		configs: map[int][]url.Values{}, storage: newStorage(),
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.handle))
	if l != nil {
		_ = s.Listener.Close()
		s.Listener = l
		s.TLS = tlsConfig
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// StopCalls reports how often a VM was stopped: stops Proxmox accepted and
// started a task for, not the ones it refused.
func (s *Server) StopCalls(vmid int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopCalls[vmid]
}

// StopForms returns the parameters of every stop request for a VM, refused
// or not, in order.
func (s *Server) StopForms(vmid int) []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stopForms[vmid])
}

// ConfigUpdates returns the parameters of every accepted config update of
// a VM, in order.
func (s *Server) ConfigUpdates(vmid int) []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.configs[vmid])
}

// ConfigValue returns one key of a VM's configuration.
func (s *Server) ConfigValue(vmid int, key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vms[vmid] == nil {
		return ""
	}
	return s.vms[vmid].Config[key]
}

// Running reports whether a VM runs (a finished stop task stops it).
func (s *Server) Running(vmid int) bool {
	defer s.lockSettled()()
	return s.vms[vmid] != nil && s.vms[vmid].Running
}

// ShutdownPending reports whether a VM's shutdown task still holds its lock.
func (s *Server) ShutdownPending(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vms[vmid] != nil && s.vms[vmid].ShutdownPending
}

var (
	statusRe  = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/qemu/(\d+)/status/(current|stop)$`)
	taskRe    = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/tasks/([^/]+)/status$`)
	taskDelRe = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/tasks/([^/]+)$`)
	configRe  = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/qemu/(\d+)/config$`)
)

// stopParams are the parameters of qemu-server's vm_stop
// (src/PVE/API2/Qemu.pm) before overrule-shutdown; node and vmid come from
// the path and may be repeated in the body.
var stopParams = []string{"node", "vmid", "skiplock", "migratedfrom", "timeout", "keepActive"}

// SetDown makes the host unreachable (true) or back (false): while down,
// every connection is closed without an answer, as a host that lost power
// leaves its clients with a broken connection.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if s.down.Load() {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if r.Header.Get("Authorization") != "PVEAPIToken="+TokenID+"="+TokenSecret {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	defer s.lockSettled()()
	if s.Fail500 > 0 {
		s.Fail500--
		writeErr(w, http.StatusInternalServerError, "temporary failure: got timeout")
		return
	}
	if err := r.ParseForm(); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	if r.URL.Path == "/api2/json/cluster/resources" && r.Method == http.MethodGet && r.Form.Get("type") == "vm" {
		// Proxmox's cluster resources of type vm: every guest of the
		// cluster, on any node.
		out := []map[string]any{}
		for _, vmid := range slices.Sorted(maps.Keys(s.vms)) {
			vm := s.vms[vmid]
			status := "stopped"
			if vm.Running {
				status = "running"
			}
			out = append(out, map[string]any{
				"id": fmt.Sprintf("qemu/%d", vmid), "type": "qemu", "vmid": vmid, "name": vm.Name,
				"node": vm.Node, "status": status, "tags": vm.Tags,
			})
		}
		writeData(w, out)
		return
	}
	if m := statusRe.FindStringSubmatch(r.URL.Path); m != nil {
		vmid, _ := strconv.Atoi(m[2])
		vm, ok := s.vmOn(w, m[1], vmid, http.StatusNotFound)
		if !ok {
			return
		}
		switch {
		case m[3] == "current" && r.Method == http.MethodGet:
			status := "stopped"
			if vm.Running {
				status = "running"
			}
			out := map[string]any{"status": status, "qmpstatus": status, "name": vm.Name, "tags": vm.Tags, "vmid": vmid}
			if b, err := parseBool(vm.Config["agent"]); err == nil && b || strings.HasPrefix(vm.Config["agent"], "enabled=1") {
				out["agent"] = 1
			}
			writeData(w, out)
		case m[3] == "stop" && r.Method == http.MethodPost:
			s.stop(w, r, vmid, vm)
		default:
			writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
		}
		return
	}
	if r.URL.Path == "/api2/json/access/permissions" && r.Method == http.MethodGet {
		s.permissions(w, r.URL.Query().Get("path"))
		return
	}
	if m := configRe.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodPut {
		s.setConfig(w, r, m[1], m[2])
		return
	}
	if m := configRe.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodGet {
		vmid, _ := strconv.Atoi(m[2])
		vm, ok := s.vmOn(w, m[1], vmid, http.StatusInternalServerError)
		if !ok {
			return
		}
		writeData(w, configJSON(vm))
		return
	}
	if m := taskRe.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodGet {
		t, ok := s.tasks[m[2]]
		if !ok {
			writeErr(w, http.StatusNotFound, "no such task")
			return
		}
		switch {
		case time.Now().Before(t.done):
			writeData(w, map[string]any{"status": "running"})
		case t.failMsg != "":
			writeData(w, map[string]any{"status": "stopped", "exitstatus": t.failMsg})
		case t.exit != "":
			writeData(w, map[string]any{"status": "stopped", "exitstatus": t.exit})
		default:
			writeData(w, map[string]any{"status": "stopped", "exitstatus": "OK"})
		}
		return
	}
	if m := taskDelRe.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodDelete {
		// Stopping a task that already ended changes nothing.
		if _, ok := s.tasks[m[2]]; !ok {
			writeErr(w, http.StatusNotFound, "no such task")
			return
		}
		writeData(w, nil)
		return
	}
	if s.handleStorage(w, r) || s.handleAccess(w, r) || s.handleQemu(w, r) {
		return
	}
	writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
}

// stop is qemu-server's vm_stop: the parameter check, then a qmstop task
// that, with overrule-shutdown, first aborts the VM's qmshutdown tasks.
func (s *Server) stop(w http.ResponseWriter, r *http.Request, vmid int, vm *VM) {
	if s.Forbidden {
		writeErr(w, http.StatusForbidden, fmt.Sprintf("Permission check failed (/vms/%d, VM.PowerMgmt)", vmid))
		return
	}
	s.stopForms[vmid] = append(s.stopForms[vmid], r.PostForm)
	allowed := stopParams
	if !s.OldPVE {
		allowed = append(slices.Clone(stopParams), "overrule-shutdown")
	}
	if errs := unknownParams(r.PostForm, allowed); len(errs) > 0 {
		writeParamErr(w, errs)
		return
	}
	overrule := false
	if v, ok := r.PostForm["overrule-shutdown"]; ok {
		b, err := parseBool(v[0])
		if err != nil {
			writeParamErr(w, map[string]string{"overrule-shutdown": err.Error()})
			return
		}
		overrule = b
	}
	if overrule && vm.HA {
		writeParamErr(w, map[string]string{"overrule-shutdown": "Not applicable for HA resources."})
		return
	}
	s.stopCalls[vmid]++
	t := &task{done: time.Now().Add(s.TaskLatency)}
	if overrule {
		vm.ShutdownPending = false // abort_guest_tasks, at the start of the task
	}
	if vm.Locked || vm.ShutdownPending {
		t.failMsg = fmt.Sprintf("can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout", vmid)
	} else {
		t.apply = func() { vm.Running = false }
	}
	upid := s.newTask(vm.Node, "qmstop", strconv.Itoa(vmid), t)
	writeData(w, upid)
}

// vmOn returns the VM when it is on node; otherwise it answers as
// qemu-server does for a config file that is not there (with code: 404 for
// the status calls, 500 for the others).
func (s *Server) vmOn(w http.ResponseWriter, node string, vmid, code int) (*VM, bool) {
	vm, ok := s.vms[vmid]
	if !ok || vm.Node != node {
		writeErr(w, code, fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid))
		return nil, false
	}
	return vm, true
}

// setConfig is qemu-server's update_vm (PUT, synchronous): the VM must be on
// the node, the token needs VM.Config.CDROM for a CD-ROM drive; each
// parameter replaces the key of the VM's configuration.
func (s *Server) setConfig(w http.ResponseWriter, r *http.Request, node, id string) {
	vmid, _ := strconv.Atoi(id)
	vm, ok := s.vmOn(w, node, vmid, http.StatusInternalServerError)
	if !ok {
		return
	}
	if s.Forbidden {
		writeErr(w, http.StatusForbidden, fmt.Sprintf("Permission check failed (/vms/%d, VM.Config.CDROM)", vmid))
		return
	}
	if errs := s.updateConfig(vmid, vm, r.PostForm); len(errs) > 0 {
		writeParamErr(w, errs)
		return
	}
	writeData(w, nil)
}

// permissions answers /access/permissions for one path: the privileges of
// the ACLs on it and on its parents, each with its propagate flag.
func (s *Server) permissions(w http.ResponseWriter, path string) {
	acls := s.ACLs
	if acls == nil {
		acls = map[string][]string{"/": {"*"}}
	}
	privs := map[string]int{}
	for p, list := range acls {
		if p != "/" && p != path && !strings.HasPrefix(path, strings.TrimRight(p, "/")+"/") {
			continue
		}
		for _, priv := range list {
			if priv == "*" {
				for _, all := range AllPrivileges {
					privs[all] = 1
				}
				continue
			}
			privs[priv] = 1
		}
	}
	writeData(w, map[string]any{path: privs})
}

// AllPrivileges are the privileges of the Administrator role the fake
// knows of: what the program and the doctor ask for.
var AllPrivileges = []string{
	"Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit",
	"SDN.Audit", "SDN.Use", "Sys.Audit", "Sys.Modify",
	"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk",
	"VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.GuestAgent.Audit",
	"VM.PowerMgmt",
	// Making the Proxmox CSI plugin's role, user, ACLs and token.
	"Permissions.Modify", "Realm.AllocateUser", "User.Modify",
}

// newTask registers a task and returns its UPID.
func (s *Server) newTask(node, kind, id string, t *task) string {
	s.seq++
	upid := fmt.Sprintf("UPID:%s:%08X:0000:%08X:%s:%s:%s:", node, s.seq, time.Now().Unix(), kind, id, TokenID)
	s.tasks[upid] = t
	return upid
}

// lockSettled takes the lock and settles the tasks; the function it
// returns releases the lock and then runs what the tasks left for after
// it (OnDestroy).
func (s *Server) lockSettled() (unlock func()) {
	s.mu.Lock()
	s.settle()
	return func() {
		after := s.afterUnlock
		s.afterUnlock = nil
		s.mu.Unlock()
		for _, f := range after {
			f()
		}
	}
}

// settle applies the effect of every task that finished without failing.
func (s *Server) settle() {
	now := time.Now()
	for _, t := range s.tasks {
		if !now.Before(t.done) && t.failMsg == "" && !t.applied {
			t.applied = true
			if t.apply != nil {
				t.apply()
			}
		}
	}
}

// unknownParams returns the form's parameters outside allowed, with the
// reason pve-common's JSONSchema gives for a schema that forbids additional
// properties.
func unknownParams(form url.Values, allowed []string) map[string]string {
	errs := map[string]string{}
	for k := range form {
		if !slices.Contains(allowed, k) {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
		}
	}
	return errs
}

// parseBool accepts what pve-common's JSONSchema accepts for a boolean.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("type check ('boolean') failed - got '%s'", v)
}

func writeData(w http.ResponseWriter, data any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

// writeErr answers like Proxmox: the reason in the status line and body.
func writeErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"data": nil, "message": msg + "\n"})
}

// writeParamErr answers like Proxmox's parameter check (raise_param_exc, or
// the schema validation before the method runs): 400, one reason per
// parameter.
func writeParamErr(w http.ResponseWriter, errs map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"data": nil, "errors": errs, "message": "Parameter verification failed.\n"})
}
