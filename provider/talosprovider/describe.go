package talosprovider

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fluodata/talos-pulumi/provider/internal/docs"
)

// finish makes the schema infer generated the package's: described
// (describe), then plain where the components take plain values and every
// type in the index module (shape).
func finish(schema string, descs map[string]docs.Type) (string, error) {
	var spec map[string]any
	if err := json.Unmarshal([]byte(schema), &spec); err != nil {
		return "", fmt.Errorf("unable to read the schema: %w", err)
	}
	describe(spec, descs)
	if err := shape(spec); err != nil {
		return "", fmt.Errorf("unable to shape the schema: %w", err)
	}
	out, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("unable to write the schema: %w", err)
	}
	return string(out), nil
}

// describe adds the doc comments to the schema infer generated: each
// component's description stays its own (Annotate), every input and output
// property, object type and type property without a description gets its
// Go doc comment. Type tokens are still infer's here,
// talos-cluster:<Go package>:<Go type> (shape moves them afterwards).
func describe(spec map[string]any, descs map[string]docs.Type) {
	types, _ := spec["types"].(map[string]any)
	for token, t := range types {
		obj, _ := t.(map[string]any)
		_, mod, name := splitToken(token)
		d, ok := descs[mod+"."+name]
		if !ok || obj == nil {
			continue
		}
		setDescription(obj, d.Doc)
		describeProperties(obj["properties"], d)
	}
	resources, _ := spec["resources"].(map[string]any)
	for token, r := range resources {
		obj, _ := r.(map[string]any)
		keys, ok := resourceDocs[token]
		if !ok || obj == nil {
			continue
		}
		describeProperties(obj["inputProperties"], descs[keys.inputs])
		describeProperties(obj["properties"], descs[keys.outputs])
	}
}

func describeProperties(props any, d docs.Type) {
	m, _ := props.(map[string]any)
	for name, p := range m {
		if prop, ok := p.(map[string]any); ok {
			setDescription(prop, d.Fields[name])
		}
	}
}

func setDescription(obj map[string]any, text string) {
	if text == "" {
		return
	}
	if cur, _ := obj["description"].(string); cur == "" {
		obj["description"] = text
	}
}

func splitToken(token string) (pkg, mod, name string) {
	parts := strings.SplitN(token, ":", 3)
	if len(parts) != 3 {
		return "", "", token
	}
	return parts[0], parts[1], parts[2]
}
