package tests

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

var updateURNs = flag.Bool("update-urns", false, "rewrite testdata/urns/*.txt from the program as it is")

// A resource's URN is its identity in the state: a changed type, name or
// parent makes the next `up` delete the old resource and create a new one
// (a new VM, new machine secrets). Every URN the program registers for the
// example stacks is kept in a golden file, so a refactoring that changes one
// fails here; a change on purpose is made with -update-urns and says in the
// docs (docs/proxmox.md, docs/vps.md, docs/talos-cluster.md) which
// `pulumi state` steps move an existing stack.
func TestExampleStacksKeepTheirURNs(t *testing.T) {
	t.Parallel()
	for _, tc := range stackstest.Examples {
		t.Run(tc.Stack, func(t *testing.T) {
			t.Parallel()
			src := stackstest.Example(t, tc.File)
			e, _, _, err := programtest.Run(t, src, tc.Stack, program.Options{})
			require.NoError(t, err)

			var urns []string
			for _, r := range e.Created() {
				require.NotEmpty(t, r.URN, "%s %s has a URN", r.Type, r.Name)
				urns = append(urns, r.URN)
			}
			slices.Sort(urns)
			got := strings.Join(urns, "\n") + "\n"
			path := filepath.Join("testdata", "urns", tc.Stack+".txt")
			if *updateURNs {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(got), 0o600))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run `go test ./tests -run TestExampleStacksKeepTheirURNs -update-urns` once to create it")
			assert.Equal(t, string(want), got, "the URNs of %s changed: existing stacks would lose or re-create these resources", tc.Stack)
		})
	}
}
