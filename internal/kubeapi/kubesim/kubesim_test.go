package kubesim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A manifest of CRDs is read as YAML documents or JSON; what a create
// would be refused for is dropped; anything but a CRD is refused.
func TestParseCRDs(t *testing.T) {
	crds, err := parseCRDs([]byte(`---
# a comment only
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: as.example.com
  resourceVersion: "12"
  uid: 0a1b
spec:
  group: example.com
status:
  acceptedNames: {}
--- 
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: bs.example.com}
`))
	require.NoError(t, err)
	require.Len(t, crds, 2)
	assert.Equal(t, map[string]any{"name": "as.example.com"}, crds[0]["metadata"])
	assert.NotContains(t, crds[0], "status")
	assert.Equal(t, map[string]any{"group": "example.com"}, crds[0]["spec"])
	assert.Equal(t, "bs.example.com", crds[1]["metadata"].(map[string]any)["name"])

	crds, err = parseCRDs([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"cs.example.com"}}`))
	require.NoError(t, err)
	require.Len(t, crds, 1)

	_, err = parseCRDs([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	assert.ErrorContains(t, err, "v1 ConfigMap is no apiextensions.k8s.io/v1 CustomResourceDefinition")
	_, err = parseCRDs([]byte("a: [b"))
	assert.Error(t, err)
}

// An Indexed Job's completed indexes are written as the job controller
// writes them.
func TestIndexes(t *testing.T) {
	for n, want := range map[int]string{0: "", 1: "0", 2: "0,1", 3: "0-2", 10: "0-9"} {
		assert.Equal(t, want, indexes(n), n)
	}
}
