package pveapitest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answer is Proxmox's JSON envelope.
type answer struct {
	Status  int
	Data    json.RawMessage   `json:"data"`
	Message string            `json:"message"`
	Errors  map[string]string `json:"errors"`
}

func call(t *testing.T, s *Server, method, path string, form url.Values) answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, s.URL+"/api2/json"+path, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "PVEAPIToken="+TokenID+"="+TokenSecret)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var a answer
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
	a.Status = resp.StatusCode
	return a
}

func exitStatus(t *testing.T, s *Server, upidJSON json.RawMessage) string {
	t.Helper()
	var upid string
	require.NoError(t, json.Unmarshal(upidJSON, &upid))
	a := call(t, s, http.MethodGet, "/nodes/pve/tasks/"+url.PathEscape(upid)+"/status", nil)
	var st struct {
		Status     string `json:"status"`
		ExitStatus string `json:"exitstatus"`
	}
	require.NoError(t, json.Unmarshal(a.Data, &st))
	require.Equal(t, "stopped", st.Status)
	return st.ExitStatus
}

func TestStopParametersAsProxmoxChecksThem(t *testing.T) {
	t.Parallel()
	s := New(t, map[int]*VM{110: {Node: "pve", Name: "cp-0", Running: true, ShutdownPending: true}})
	a := call(t, s, http.MethodPost, "/nodes/pve/qemu/110/status/stop", url.Values{"bogus": {"1"}})
	assert.Equal(t, http.StatusBadRequest, a.Status)
	assert.Equal(t, "Parameter verification failed.\n", a.Message)
	assert.Contains(t, a.Errors["bogus"], "property is not defined in schema")

	a = call(t, s, http.MethodPost, "/nodes/pve/qemu/110/status/stop", url.Values{})
	assert.Contains(t, exitStatus(t, s, a.Data), "can't lock file '/var/lock/qemu-server/lock-110.conf' - got timeout")
	assert.True(t, s.Running(110), "a shutdown task holds the lock")

	s.OldPVE = true
	a = call(t, s, http.MethodPost, "/nodes/pve/qemu/110/status/stop", url.Values{"overrule-shutdown": {"1"}})
	assert.Equal(t, http.StatusBadRequest, a.Status)
	assert.Contains(t, a.Errors["overrule-shutdown"], "property is not defined in schema")

	s.OldPVE = false
	a = call(t, s, http.MethodPost, "/nodes/pve/qemu/110/status/stop", url.Values{"overrule-shutdown": {"1"}})
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	assert.False(t, s.Running(110))
	assert.Equal(t, 2, s.StopCalls(110), "the refused calls started no task")
	assert.Len(t, s.StopForms(110), 4)
}

func TestDownloadRefusesExistingFileAndDeleteRemovesIt(t *testing.T) {
	t.Parallel()
	s := New(t, nil)
	s.TaskLatency = 20 * time.Millisecond
	const iso = "https://factory.talos.dev/image/x/v1.12.4/metal-amd64.iso"
	s.Serve(iso, 100)
	form := url.Values{"content": {"iso"}, "filename": {"a b.iso"}, "url": {iso}, "node": {"pve"}, "storage": {"local"}}
	a := call(t, s, http.MethodPost, "/nodes/pve/storage/local/download-url", form)
	require.Equal(t, http.StatusOK, a.Status, a.Message)
	assert.Empty(t, s.Volumes("pve"), "the file appears when the task ends")
	time.Sleep(30 * time.Millisecond)
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	assert.Equal(t, []string{"local:iso/a_b.iso"}, s.Volumes("pve"), "stored under the normalized name")

	a = call(t, s, http.MethodPost, "/nodes/pve/storage/local/download-url", form)
	time.Sleep(30 * time.Millisecond)
	assert.Equal(t, "refusing to override existing file '/var/lib/vz/template/iso/a_b.iso'", exitStatus(t, s, a.Data))

	a = call(t, s, http.MethodGet, "/nodes/pve/storage/local/content?content=iso", nil)
	assert.JSONEq(t, `[{"volid":"local:iso/a_b.iso","content":"iso","format":"iso","size":100}]`, string(a.Data))

	form.Set("filename", "a.qcow2")
	a = call(t, s, http.MethodPost, "/nodes/pve/storage/local/download-url", form)
	assert.Equal(t, map[string]string{"filename": "wrong file extension"}, a.Errors)

	// With or without the storage in the volume id, as bpg escapes it.
	a = call(t, s, http.MethodDelete, "/nodes/pve/storage/local/content/"+url.PathEscape("iso/a_b.iso"), nil)
	assert.Equal(t, "OK", exitStatus(t, s, a.Data))
	assert.Empty(t, s.Volumes("pve"))
	a = call(t, s, http.MethodDelete, "/nodes/pve/storage/local/content/"+url.PathEscape("local:iso/a_b.iso"), nil)
	assert.Equal(t, "WARNINGS: 1", exitStatus(t, s, a.Data), "a missing file is a warning")
	a = call(t, s, http.MethodDelete, "/nodes/pve/storage/local/content/"+url.PathEscape("other:iso/a_b.iso"), nil)
	assert.Equal(t, "storage ID mismatch (other != local)", a.Errors["volume"])
}

// A fake at a given address has a certificate for it, which a client that
// trusts it (and nothing else) verifies.
func TestNewAtServesACertificateForItsAddress(t *testing.T) {
	s := NewAt(t, map[int]*VM{}, "127.0.0.2:0")
	assert.True(t, strings.HasPrefix(s.URL, "https://127.0.0.2:"), s.URL)
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Get(s.URL + "/api2/json/version")
	require.NoError(t, err, "verified against its own certificate")
	_ = resp.Body.Close()
	resp, err = http.Get(s.URL + "/api2/json/version")
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "not trusted by default")
}

// A token keeps what it was made with, as pve-access-control keeps it
// (privsep 1 and expire 0 unless given), and its read returns that: the
// bpg provider's refresh of a token reads it.
func TestATokenIsReadAsItWasMade(t *testing.T) {
	t.Parallel()
	s := New(t, map[int]*VM{})
	require.Equal(t, http.StatusOK, call(t, s, http.MethodPost, "/access/users", url.Values{"userid": {"csi@pve"}}).Status)
	a := call(t, s, http.MethodPost, "/access/users/csi@pve/token/csi", url.Values{"privsep": {"0"}, "comment": {"Proxmox CSI plugin"}})
	require.Equal(t, http.StatusOK, a.Status)
	a = call(t, s, http.MethodGet, "/access/users/csi@pve/token/csi", nil)
	require.Equal(t, http.StatusOK, a.Status)
	assert.JSONEq(t, `{"comment":"Proxmox CSI plugin","expire":0,"privsep":0}`, string(a.Data))

	require.Equal(t, http.StatusOK, call(t, s, http.MethodPost, "/access/users/csi@pve/token/other", url.Values{}).Status)
	assert.JSONEq(t, `{"expire":0,"privsep":1}`, string(call(t, s, http.MethodGet, "/access/users/csi@pve/token/other", nil).Data))

	require.Equal(t, http.StatusOK, call(t, s, http.MethodDelete, "/access/users/csi@pve", nil).Status)
	a = call(t, s, http.MethodGet, "/access/users/csi@pve/token/csi", nil)
	assert.Equal(t, "no such token 'csi' for user 'csi@pve'\n", a.Message, "the user's tokens go with it")
}
