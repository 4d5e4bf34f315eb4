package talosprovider_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/proxmox"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/components/vps"
	"github.com/fluodata/talos-pulumi/provider/internal/kubeschema"
	"github.com/fluodata/talos-pulumi/provider/talosprovider"
)

// One kubernetes version: the Go SDK the components are built with (as
// go.mod resolves it), the type tag of each component's
// kubernetesProvider output (the schema's reference), the extracted schema
// the SDK generators load, and the SDKs' dependencies.
func TestOneKubernetesVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", kubeschema.SDKModule).Output()
	require.NoError(t, err)
	built := strings.TrimSpace(string(out))
	assert.Equal(t, "v"+talosprovider.KubernetesVersion, built, "the kubernetes SDK in go.mod")
	for _, typ := range []reflect.Type{reflect.TypeFor[talos.Cluster](), reflect.TypeFor[proxmox.Cluster](), reflect.TypeFor[vps.Cluster]()} {
		f, ok := typ.FieldByName("KubernetesProvider")
		require.True(t, ok, typ.String())
		assert.Equal(t, "type=kubernetes@v"+talosprovider.KubernetesVersion+":index:Provider", f.Tag.Get("provider"), typ.String())
	}
	var spec struct{ Version string }
	require.NoError(t, json.Unmarshal(kubeschema.JSON(), &spec))
	assert.Equal(t, talosprovider.KubernetesVersion, spec.Version, "kubeschema's kubernetes.json (go generate ./internal/kubeschema)")
	golden, err := os.ReadFile(filepath.Join("testdata", "schema.json"))
	require.NoError(t, err)
	assert.Contains(t, string(golden), `"$ref": "/kubernetes/v`+talosprovider.KubernetesVersion+`/schema.json#/provider"`)
	var languages struct {
		Language struct {
			NodeJS struct{ Dependencies map[string]string } `json:"nodejs"`
			Python struct{ Requires map[string]string }     `json:"python"`
		}
	}
	require.NoError(t, json.Unmarshal(golden, &languages))
	assert.Equal(t, "^"+talosprovider.KubernetesVersion, languages.Language.NodeJS.Dependencies["@pulumi/kubernetes"], "any 4.x from ours")
	assert.Equal(t, ">="+talosprovider.KubernetesVersion+",<5", languages.Language.Python.Requires["pulumi-kubernetes"], "any 4.x from ours")
}
