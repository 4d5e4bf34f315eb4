package godoc_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/godoc"
)

const source = `package p

// DefaultPort is the port.
const DefaultPort = "22"

// Settings is what a test reads.
// Its second line.
type Settings struct {
	// Host is the host,
	// on two lines.
	//
	// A second paragraph.
	Host string ` + "`json:\"host\" pulumi:\"hostName\"`" + `
	// A and B share a comment.
	A, B int ` + "`json:\"ab,omitempty\"`" + `
	Skipped string ` + "`json:\"-\"`" + `
	Bare    string ` + "`json:\"bare\"`" + `
	untagged string
}

// Untagged has no tagged field.
type Untagged struct{ X int }
`

func TestReadTakesTheCommentsOfTaggedFields(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(source), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\ntype FromTest struct{ Y int `json:\"y\"` }\n"), 0o600))

	pkg, err := godoc.Read(dir, "json")
	require.NoError(t, err)
	assert.Equal(t, "p", pkg.Name)
	assert.Equal(t, map[string]string{"DefaultPort": "22"}, pkg.Consts)
	require.Equal(t, []string{"Settings"}, keys(pkg.Structs), "only structs with a tagged field, test files aside")
	s := pkg.Structs["Settings"]
	assert.Equal(t, "Settings is what a test reads. Its second line.", s.Doc)
	assert.Equal(t, []godoc.Field{
		{GoName: "Host", Name: "host", Doc: "Host is the host, on two lines.\n\nA second paragraph."},
		{GoName: "A", Name: "ab", Doc: "A and B share a comment."},
		{GoName: "B", Name: "ab", Doc: "A and B share a comment."},
		{GoName: "Bare", Name: "bare"},
	}, s.Fields)
	assert.Equal(t, "A and B share a comment.", s.FieldDoc("ab"))
	assert.Empty(t, s.FieldDoc("bare"))

	byPulumi, err := godoc.Read(dir, "pulumi")
	require.NoError(t, err)
	assert.Equal(t, "hostName", byPulumi.Structs["Settings"].Fields[0].Name, "the tag key chosen names the fields")
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
