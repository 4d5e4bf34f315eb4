package tests

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
)

var updateInputs = flag.Bool("update-inputs", false, "rewrite testdata/inputs/*.json from the program as it is")

// A resource's inputs decide what the next `up` changes: a new input value
// (a Helm value added for every stack, a new field of a VM) is an update of
// every running cluster. Every input the program registers for the example
// stacks (secrets as "[secret]") is kept in a golden file, so a change that
// reaches existing stacks fails here; a change on purpose is made with
// -update-inputs and says in the docs what the next `up` of an existing stack
// does. The golden files of the examples that predate issue 38 were written
// at the commit before it (ea2171c) and pass unchanged: stacks without
// loadBalancer and gitops sections see no change.
func TestExampleStacksKeepTheirInputs(t *testing.T) {
	t.Parallel()
	exampleGoldens(t, exampleGolden{
		file: func(stack string) string { return filepath.Join("testdata", "inputs", stack+".json") }, update: *updateInputs,
		how: "go test ./tests -run TestExampleStacksKeepTheirInputs -update-inputs",
		render: func(t *testing.T, e *componentstest.Engine) string {
			inputs := map[string]any{}
			for _, r := range e.Created() {
				inputs[r.URN] = plain(resource.NewObjectProperty(r.Inputs))
			}
			got, err := json.MarshalIndent(inputs, "", " ")
			require.NoError(t, err)
			return string(got) + "\n"
		},
		compare: func(t *testing.T, want, got, stack string) {
			assert.JSONEq(t, want, got, "the inputs of %s changed: the next up of every such stack changes these resources", stack)
		},
	})
}

// plain is v as JSON holds it: secrets as "[secret]", unknowns as
// "[unknown]".
func plain(v resource.PropertyValue) any {
	switch {
	case v.IsSecret():
		return "[secret]"
	case v.IsComputed():
		return "[unknown]"
	case v.IsOutput():
		if !v.OutputValue().Known {
			return "[unknown]"
		}
		if v.OutputValue().Secret {
			return "[secret]"
		}
		return plain(v.OutputValue().Element)
	case v.IsObject():
		out := map[string]any{}
		for k, e := range v.ObjectValue() {
			out[string(k)] = plain(e)
		}
		return out
	case v.IsArray():
		out := []any{}
		for _, e := range v.ArrayValue() {
			out = append(out, plain(e))
		}
		return out
	case v.IsResourceReference():
		return "[resource " + string(v.ResourceReferenceValue().URN) + "]"
	case v.IsAsset(), v.IsArchive():
		return "[asset]"
	}
	return v.Mappable()
}
