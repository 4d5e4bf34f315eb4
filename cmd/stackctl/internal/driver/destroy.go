package driver

import (
	"encoding/json"
	"fmt"
)

// RunProgramFlag is what `pulumi destroy` needs to run the program, whose
// fast-delete hooks are program code.
const RunProgramFlag = "--run-program"

// DestroyRunsProgram says whether a destroy of the stack whose state is
// deployment (`pulumi stack export`'s document, or its deployment field)
// runs the program: only while the state holds a resource of a provider.
// Pulumi 3.259's `destroy --run-program` on a stack that holds none records
// the components the program registers as created and leaves them there,
// so a second `make destroy` would leave three resources behind; without
// the program, the same destroy removes such leftovers.
func DestroyRunsProgram(deployment []byte) (bool, error) {
	var doc struct {
		Deployment *struct {
			Resources []struct {
				Custom bool `json:"custom"`
			} `json:"resources"`
		} `json:"deployment"`
		Resources []struct {
			Custom bool `json:"custom"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(deployment, &doc); err != nil {
		return false, fmt.Errorf("unable to read the stack's state: %w", err)
	}
	resources := doc.Resources
	if doc.Deployment != nil {
		resources = doc.Deployment.Resources
	}
	for _, r := range resources {
		if r.Custom {
			return true, nil
		}
	}
	return false, nil
}
