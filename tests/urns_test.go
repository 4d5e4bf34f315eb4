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

	"github.com/fluodata/talos-pulumi/components/componentstest"
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
	exampleGoldens(t, exampleGolden{
		file: func(stack string) string { return filepath.Join("testdata", "urns", stack+".txt") }, update: *updateURNs,
		how: "go test ./tests -run TestExampleStacksKeepTheirURNs -update-urns",
		render: func(t *testing.T, e *componentstest.Engine) string {
			var urns []string
			for _, r := range e.Created() {
				require.NotEmpty(t, r.URN, "%s %s has a URN", r.Type, r.Name)
				urns = append(urns, r.URN)
			}
			slices.Sort(urns)
			return strings.Join(urns, "\n") + "\n"
		},
		compare: func(t *testing.T, want, got, stack string) {
			assert.Equal(t, want, got, "the URNs of %s changed: existing stacks would lose or re-create these resources", stack)
		},
	})
}

// exampleGolden is a golden file per example stack of what the program
// registers for it.
type exampleGolden struct {
	file    func(stack string) string
	update  bool
	how     string // the command that writes the files
	render  func(t *testing.T, e *componentstest.Engine) string
	compare func(t *testing.T, want, got, stack string)
}

// exampleGoldens runs the program on every example stack under mocks and
// holds what g renders of its registrations to the stack's golden file
// (written first with g.update).
func exampleGoldens(t *testing.T, g exampleGolden) {
	t.Helper()
	for _, tc := range stackstest.Examples {
		t.Run(tc.Stack, func(t *testing.T) {
			t.Parallel()
			e, _, _, err := programtest.Run(t, stackstest.Example(t, tc.File), tc.Stack, program.Options{})
			require.NoError(t, err)
			got := g.render(t, e)
			path := g.file(tc.Stack)
			if g.update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o750))
				require.NoError(t, os.WriteFile(path, []byte(got), 0o600))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run `%s` once to create it", g.how)
			g.compare(t, string(want), got, tc.Stack)
		})
	}
}
