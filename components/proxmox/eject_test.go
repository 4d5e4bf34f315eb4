package proxmox

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	testTokenID     = "root@pam!pulumi"
	testTokenSecret = "0b9e4a52-3c1f-4b7e-9a2d-6f8e1c0d5a47"
)

// fakeConfigAPI answers PUT /api2/json/nodes/{node}/qemu/{vmid}/config like
// Proxmox: 401 without a valid token, the given status for the first
// failures calls, then success.
func fakeConfigAPI(t *testing.T, failures int32, failStatus int) (*httptest.Server, *atomic.Int32, *[]string) {
	t.Helper()
	var calls atomic.Int32
	var bodies []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.Header.Get("Authorization") != "PVEAPIToken="+testTokenID+"="+testTokenSecret {
			http.Error(w, `{"data":null,"message":"authentication failure"}`, http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPut || r.URL.Path != "/api2/json/nodes/pve/qemu/110/config" {
			http.Error(w, `{"data":null,"message":"no such method"}`, http.StatusNotImplemented)
			return
		}
		if n <= failures {
			http.Error(w, `{"data":null,"message":"temporary failure"}`, failStatus)
			return
		}
		require.NoError(t, r.ParseForm())
		bodies = append(bodies, r.PostForm.Encode())
		_, _ = w.Write([]byte(`{"data":null}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &calls, &bodies
}

func runEject(t *testing.T, srv *httptest.Server, secret string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed; .ci/run installs it")
	}
	cmd := exec.Command("sh", "-c", EjectCommand(true)) // the fake's certificate is self-signed
	cmd.Env = append(os.Environ(), "PVE_API="+APIURL(srv.URL+"/"), "PVE_NODE=pve", "PVE_VMID=110")
	cmd.Stdin = strings.NewReader(AuthHeader(testTokenID, secret))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestEjectCommandEmptiesTheCDROM(t *testing.T) {
	t.Parallel()
	srv, calls, bodies := fakeConfigAPI(t, 0, 0)
	out, err := runEject(t, srv, testTokenSecret)
	require.NoError(t, err, out)
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, []string{"ide2=none%2Cmedia%3Dcdrom"}, *bodies)
	assert.NotContains(t, EjectCommand(true), testTokenSecret)
	assert.NotContains(t, EjectCommand(false), "--insecure", "TLS verification stays on unless the stack says insecure")
}

func TestEjectCommandRetriesTransientErrors(t *testing.T) {
	t.Parallel()
	srv, calls, bodies := fakeConfigAPI(t, 2, http.StatusServiceUnavailable)
	out, err := runEject(t, srv, testTokenSecret)
	require.NoError(t, err, out)
	assert.Equal(t, int32(3), calls.Load())
	assert.Len(t, *bodies, 1)
}

func TestEjectCommandFailsOnAuthError(t *testing.T) {
	t.Parallel()
	srv, calls, _ := fakeConfigAPI(t, 0, 0)
	out, err := runEject(t, srv, "11111111-2222-3333-4444-555555555555")
	require.Error(t, err)
	assert.Contains(t, out, "authentication failure", "the API's message is shown")
	assert.Equal(t, int32(1), calls.Load(), "no retry on 401")
}

func TestAPIURL(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "https://pve:8006/api2/json", APIURL("https://pve:8006/"))
	assert.Equal(t, "https://pve:8006/api2/json", APIURL("https://pve:8006"))
	assert.Equal(t, "https://proxy.example/pve/api2/json", APIURL("https://proxy.example/pve/"))
}
