// Package pvefake is an httptest Proxmox VE API that behaves like the real
// one for the calls this project makes around VM deletion: API-token
// authentication, VM status, a hard stop that returns a task id (UPID) and
// finishes after a configurable latency, task status polling, 404 for unknown
// VMs, bursts of 500s, and the lock error a VM busy with a shutdown gives.
package pvefake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
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
	// Locked makes a stop task fail the way a VM held by a shutdown does.
	Locked bool
}

// Server is the fake API.
type Server struct {
	*httptest.Server
	// TaskLatency is how long a stop task runs.
	TaskLatency time.Duration
	// Fail500 answers the next n requests with 500.
	Fail500 int
	// Forbidden answers every stop with 403 (a token without VM.PowerMgmt).
	Forbidden bool

	mu        sync.Mutex
	vms       map[int]*VM
	tasks     map[string]*task
	stopCalls map[int]int
	seq       int
}

type task struct {
	vmid    int
	done    time.Time
	failMsg string
}

// New starts a fake with the given VMs by id.
func New(t testing.TB, vms map[int]*VM) *Server {
	t.Helper()
	s := &Server{vms: vms, tasks: map[string]*task{}, stopCalls: map[int]int{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// StopCalls reports how often a VM was asked to stop.
func (s *Server) StopCalls(vmid int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopCalls[vmid]
}

// Running reports whether a VM runs (a finished stop task stops it).
func (s *Server) Running(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	return s.vms[vmid] != nil && s.vms[vmid].Running
}

var (
	statusRe = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/qemu/(\d+)/status/(current|stop)$`)
	taskRe   = regexp.MustCompile(`^/api2/json/nodes/([^/]+)/tasks/([^/]+)/status$`)
)

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "PVEAPIToken="+TokenID+"="+TokenSecret {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Fail500 > 0 {
		s.Fail500--
		writeErr(w, http.StatusInternalServerError, "temporary failure: got timeout")
		return
	}
	s.settle()
	if m := statusRe.FindStringSubmatch(r.URL.Path); m != nil {
		vmid, _ := strconv.Atoi(m[2])
		vm, ok := s.vms[vmid]
		if !ok || vm.Node != m[1] {
			writeErr(w, http.StatusNotFound, fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", m[1], vmid))
			return
		}
		switch {
		case m[3] == "current" && r.Method == http.MethodGet:
			status := "stopped"
			if vm.Running {
				status = "running"
			}
			writeData(w, map[string]any{"status": status, "name": vm.Name, "tags": vm.Tags, "vmid": vmid})
		case m[3] == "stop" && r.Method == http.MethodPost:
			if s.Forbidden {
				writeErr(w, http.StatusForbidden, fmt.Sprintf("Permission check failed (/vms/%d, VM.PowerMgmt)", vmid))
				return
			}
			s.stopCalls[vmid]++
			s.seq++
			upid := fmt.Sprintf("UPID:%s:%08X:0000:%08X:qmstop:%d:%s:", vm.Node, s.seq, time.Now().Unix(), vmid, TokenID)
			t := &task{vmid: vmid, done: time.Now().Add(s.TaskLatency)}
			if vm.Locked {
				t.failMsg = fmt.Sprintf("can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout", vmid)
			}
			s.tasks[upid] = t
			writeData(w, upid)
		default:
			writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
		}
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
		default:
			writeData(w, map[string]any{"status": "stopped", "exitstatus": "OK"})
		}
		return
	}
	writeErr(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented")
}

// settle applies finished stop tasks to their VMs.
func (s *Server) settle() {
	now := time.Now()
	for _, t := range s.tasks {
		if !now.Before(t.done) && t.failMsg == "" {
			if vm := s.vms[t.vmid]; vm != nil {
				vm.Running = false
			}
		}
	}
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
