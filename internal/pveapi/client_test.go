package pveapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const token = "PVEAPIToken=root@pam!pulumi=0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47"

func newClient(t *testing.T, h http.HandlerFunc) (*Client, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != token {
			http.Error(w, "authentication failure", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/", "root@pam!pulumi", "0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47",
		Options{HTTPClient: srv.Client(), Backoff: time.Millisecond, CallTimeout: time.Second})
	require.NoError(t, err)
	return c, &calls
}

func TestVersionWithToken(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/api2/json/version", r.URL.Path)
		_, _ = w.Write([]byte(`{"data":{"version":"9.1.1","release":"9.1"}}`))
	})
	v, err := c.Version(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "9.1.1", v)
}

func TestTransientErrorsAreRetriedOthersNot(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	c, calls := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) <= 2 {
			http.Error(w, `{"data":null}`, http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte(`{"data":[{"node":"pve","status":"online"}]}`))
	})
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []Node{{Node: "pve", Status: "online"}}, nodes)
	assert.Equal(t, int32(3), calls.Load())

	c2, calls2 := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"data":null,"message":"Permission check failed (/vms/110, VM.PowerMgmt)\n"}`))
	})
	_, err = c2.StopVM(context.Background(), "pve", 110)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 403, apiErr.Status)
	assert.Contains(t, err.Error(), "Permission check failed (/vms/110, VM.PowerMgmt)")
	assert.Equal(t, int32(1), calls2.Load(), "4xx is not retried")

	c3, calls3 := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	_, err = c3.Version(context.Background())
	require.Error(t, err)
	assert.Equal(t, int32(4), calls3.Load(), "bounded: one call and three retries")
}

func TestNotFoundSentinel(t *testing.T) {
	t.Parallel()
	c, calls := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api2/json/nodes/pve/qemu/404/status/current" {
			http.NotFound(w, r)
			return
		}
		// What Proxmox really answers for a VM that does not exist.
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"data":null,"message":"Configuration file 'nodes/pve/qemu-server/999.conf' does not exist\n"}`))
	})
	_, err := c.VMStatus(context.Background(), "pve", 404)
	assert.True(t, errors.Is(err, ErrNotFound), "%v", err)
	_, err = c.VMStatus(context.Background(), "pve", 999)
	assert.True(t, errors.Is(err, ErrNotFound), "%v", err)
	assert.Equal(t, int32(2), calls.Load(), "a missing VM is not retried")
}

func TestBadTokenIsNotRetried(t *testing.T) {
	t.Parallel()
	c, calls := newClient(t, func(http.ResponseWriter, *http.Request) {})
	c.auth = "PVEAPIToken=root@pam!pulumi=wrong"
	_, err := c.Version(context.Background())
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 401, apiErr.Status)
	assert.Equal(t, int32(1), calls.Load())
}

func TestTLSVerifiedUnlessInsecure(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"data":{"version":"9.1.1"}}`))
	}))
	t.Cleanup(srv.Close)
	strict, err := New(srv.URL, "root@pam!pulumi", "x", Options{Backoff: time.Hour}) // a retry would hang the test
	require.NoError(t, err)
	_, err = strict.Version(context.Background())
	require.ErrorContains(t, err, "certificate")
	var certErr *tls.CertificateVerificationError
	assert.ErrorAs(t, err, &certErr)
	loose, err := New(srv.URL, "root@pam!pulumi", "x", Options{Insecure: true})
	require.NoError(t, err)
	_, err = loose.Version(context.Background())
	require.NoError(t, err)
}

func TestWaitTask(t *testing.T) {
	t.Parallel()
	var polls atomic.Int32
	c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api2/json/nodes/pve/tasks/UPID:pve:1:ok/status":
			if polls.Add(1) < 3 {
				_, _ = w.Write([]byte(`{"data":{"status":"running"}}`))
				return
			}
			_, _ = w.Write([]byte(`{"data":{"status":"stopped","exitstatus":"OK"}}`))
		default:
			_, _ = w.Write([]byte(`{"data":{"status":"stopped","exitstatus":"can't lock file '/var/lock/qemu-server/lock-110.conf' - got timeout"}}`))
		}
	})
	require.NoError(t, c.WaitTask(context.Background(), "pve", "UPID:pve:1:ok", time.Millisecond))
	assert.Equal(t, int32(3), polls.Load())
	err := c.WaitTask(context.Background(), "pve", "UPID:pve:2:locked", time.Millisecond)
	require.ErrorContains(t, err, "got timeout")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c2, _ := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"data":{"status":"running"}}`))
	})
	err = c2.WaitTask(ctx, "pve", "UPID:pve:3:slow", 5*time.Millisecond)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// stopAPI answers the stop like Proxmox: accepted (a UPID) or refused with a
// 400 whose reasons name parameters; it records the forms it got.
func stopAPI(t *testing.T, refuse func(form map[string][]string) map[string]string) (*Client, *[]string) {
	t.Helper()
	var forms []string
	c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/api2/json/nodes/pve/qemu/110/status/stop", r.URL.Path)
		require.NoError(t, r.ParseForm())
		forms = append(forms, r.PostForm.Encode())
		if errs := refuse(r.PostForm); errs != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"data": nil, "errors": errs, "message": "Parameter verification failed.\n"})
			return
		}
		_, _ = w.Write([]byte(`{"data":"UPID:pve:1:qmstop:110"}`))
	})
	return c, &forms
}

func TestStopVMOverrulesShutdown(t *testing.T) {
	t.Parallel()
	c, forms := stopAPI(t, func(map[string][]string) map[string]string { return nil })
	upid, err := c.StopVM(context.Background(), "pve", 110)
	require.NoError(t, err)
	assert.Equal(t, "UPID:pve:1:qmstop:110", upid)
	assert.Equal(t, []string{"overrule-shutdown=1"}, *forms)
}

func TestStopVMWithoutOverruleWhereRefused(t *testing.T) {
	t.Parallel()
	for name, reason := range map[string]string{
		// What a Proxmox VE before 8.2 says: the stop's schema lacks it.
		"old PVE": "property is not defined in schema and the schema does not allow additional properties",
		// What every version says for an HA-managed VM.
		"HA VM": "Not applicable for HA resources.",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, forms := stopAPI(t, func(form map[string][]string) map[string]string {
				if _, ok := form[OverruleShutdown]; ok {
					return map[string]string{OverruleShutdown: reason}
				}
				return nil
			})
			upid, err := c.StopVM(context.Background(), "pve", 110)
			require.NoError(t, err)
			assert.Equal(t, "UPID:pve:1:qmstop:110", upid)
			assert.Equal(t, []string{"overrule-shutdown=1", ""}, *forms, "refused once, then stopped without it")
		})
	}
}

func TestStopVMOtherRefusalsAreNotRetried(t *testing.T) {
	t.Parallel()
	c, forms := stopAPI(t, func(map[string][]string) map[string]string {
		return map[string]string{"vmid": "invalid format - value does not look like a valid VM ID"}
	})
	_, err := c.StopVM(context.Background(), "pve", 110)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadRequest, apiErr.Status)
	assert.Equal(t, "Parameter verification failed.; vmid: invalid format - value does not look like a valid VM ID", apiErr.Message)
	assert.False(t, apiErr.RejectsParam(OverruleShutdown))
	assert.Len(t, *forms, 1)

	// Refused with the parameter and then failing without it: both reasons.
	c2, forms2 := stopAPI(t, func(form map[string][]string) map[string]string {
		if _, ok := form[OverruleShutdown]; ok {
			return map[string]string{OverruleShutdown: "Not applicable for HA resources."}
		}
		return map[string]string{"skiplock": "Only root may use this option."}
	})
	_, err = c2.StopVM(context.Background(), "pve", 110)
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "Only root may use this option.", apiErr.Errors["skiplock"])
	assert.ErrorContains(t, err, "unable to stop VM 110 without overrule-shutdown (refused: Not applicable for HA resources.)")
	assert.Len(t, *forms2, 2)
}
