package adopt

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/optimport"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/fluodata/talos-pulumi/stacks"
)

// The bootstrap is written into the state rather than imported: the Talos
// plugin cannot import it, and a create would call Bootstrap on a running
// etcd. Recorded as `up` records it, the next preview shows it unchanged
// (docs/decisions/0004-upstream-behaviours.md#the-talos-bootstrap-cannot-be-imported).

// Import returns the entries of the plan that `pulumi import` takes: every
// one but the bootstrap, which RecordBootstrap writes into the state.
func Import(rs []*optimport.ImportResource) []*optimport.ImportResource {
	out := make([]*optimport.ImportResource, 0, len(rs))
	for _, r := range rs {
		if r.Type != BootstrapType {
			out = append(out, r)
		}
	}
	return out
}

// BootstrapNode is the node the program bootstraps, and its endpoint: the
// first control plane of the stack (the first node of TalosCluster).
func BootstrapNode(cfg *stacks.Config) (string, error) {
	refs := cfg.Nodes.Refs()
	if len(refs) == 0 || refs[0].Role != stacks.RoleControlPlane || refs[0].IP == "" {
		return "", errors.New("the stack has no control plane to record the bootstrap on")
	}
	return refs[0].IP, nil
}

// bootstrapMeta is the bridge's record of the resource's schema version
// (talos_machine_bootstrap is at version 1); without it the bridge would
// upgrade the state from version 0, which has no clientConfiguration.
const bootstrapMeta = `{"schema_version":"1"}`

// CheckDeploymentVersion accepts the deployment versions the pinned CLI
// writes and reads: 3, and 4 when the state uses a feature that needs it
// (every real stack of this program: resource hooks and replaceWith, with
// "features" beside the version). The fields this project edits are the
// same in both (apitype.DeploymentV3); the features are kept as they are.
func CheckDeploymentVersion(top map[string]json.RawMessage, what string) error {
	var version int
	if err := json.Unmarshal(top["version"], &version); err != nil ||
		version < apitype.DeploymentSchemaVersionCurrent || version > apitype.DeploymentSchemaVersionLatest {
		return fmt.Errorf("unable to read %s: deployment version %s, expected %d or %d",
			what, top["version"], apitype.DeploymentSchemaVersionCurrent, apitype.DeploymentSchemaVersionLatest)
	}
	return nil
}

// StackState is what RecordBootstrap and Present read of a stack's
// exported state (`pulumi stack export`).
type StackState struct {
	raw       map[string]json.RawMessage
	resources []json.RawMessage
	urns      []string
}

// ParseStackState reads `pulumi stack export` output. Only the resources'
// URNs are decoded: the rest is written back as it was.
func ParseStackState(data []byte) (*StackState, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("unable to read the stack's state: %w", err)
	}
	if err := CheckDeploymentVersion(top, "the stack's state"); err != nil {
		return nil, err
	}
	var dep map[string]json.RawMessage
	if err := json.Unmarshal(top["deployment"], &dep); err != nil {
		return nil, fmt.Errorf("unable to read the stack's state: %w", err)
	}
	s := &StackState{raw: top}
	if r, ok := dep["resources"]; ok && string(r) != "null" {
		if err := json.Unmarshal(r, &s.resources); err != nil {
			return nil, fmt.Errorf("unable to read the stack's resources: %w", err)
		}
	}
	for _, r := range s.resources {
		var u struct {
			URN string `json:"urn"`
		}
		if err := json.Unmarshal(r, &u); err != nil {
			return nil, fmt.Errorf("unable to read the stack's resources: %w", err)
		}
		s.urns = append(s.urns, u.URN)
	}
	return s, nil
}

// Has reports whether the state holds a resource with this URN.
func (s *StackState) Has(urn string) bool {
	return s.index(urn) >= 0
}

func (s *StackState) index(urn string) int {
	for i, u := range s.urns {
		if u == urn {
			return i
		}
	}
	return -1
}

// Marshal returns the state for `pulumi stack import`.
func (s *StackState) Marshal() ([]byte, error) {
	var dep map[string]json.RawMessage
	if err := json.Unmarshal(s.raw["deployment"], &dep); err != nil {
		return nil, err
	}
	res, err := json.Marshal(s.resources)
	if err != nil {
		return nil, err
	}
	dep["resources"] = res
	if s.raw["deployment"], err = json.Marshal(dep); err != nil {
		return nil, err
	}
	return json.MarshalIndent(s.raw, "", "  ")
}

// RecordBootstrap adds the bootstrap of the plan to the state, right after
// the imported secrets it reads its client configuration from, as `up`
// would have created it on node: same URN, parent, provider, id, inputs and
// outputs, the client key kept encrypted as the secrets hold it. It fails
// when the secrets are not in the state; a bootstrap already there is left
// as it is (false).
func RecordBootstrap(s *StackState, stack, project string, rs []*optimport.ImportResource, node string) (bool, error) {
	urns, err := URNs(stack, project, rs)
	if err != nil {
		return false, err
	}
	bootURN, secretsURN, clusterURN := string(urns["bootstrap"]), string(urns["secrets"]), string(urns["cluster"])
	if bootURN == "" || secretsURN == "" || clusterURN == "" {
		return false, errors.New("the plan has no bootstrap, secrets or cluster entry")
	}
	if s.Has(bootURN) {
		return false, nil
	}
	i := s.index(secretsURN)
	if i < 0 {
		return false, fmt.Errorf("the state has no %s: the secrets must be imported first", secretsURN)
	}
	if !s.Has(clusterURN) {
		return false, fmt.Errorf("the state has no %s", clusterURN)
	}
	var sec struct {
		Provider string `json:"provider"`
		Outputs  struct {
			ClientConfiguration json.RawMessage `json:"clientConfiguration"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(s.resources[i], &sec); err != nil {
		return false, fmt.Errorf("unable to read %s: %w", secretsURN, err)
	}
	if sec.Provider == "" || len(sec.Outputs.ClientConfiguration) == 0 || string(sec.Outputs.ClientConfiguration) == "null" {
		return false, fmt.Errorf("%s has no provider or no clientConfiguration output", secretsURN)
	}
	cc := sec.Outputs.ClientConfiguration
	boot := map[string]any{
		"urn":    bootURN,
		"custom": true,
		"id":     BootstrapID,
		"type":   BootstrapType,
		"inputs": map[string]any{"clientConfiguration": cc, "endpoint": node, "node": node},
		"outputs": map[string]any{
			"__meta": bootstrapMeta, "id": BootstrapID,
			"clientConfiguration": cc, "endpoint": node, "node": node,
		},
		"parent":               clusterURN,
		"dependencies":         []string{secretsURN},
		"provider":             sec.Provider,
		"propertyDependencies": map[string][]string{"clientConfiguration": {secretsURN}, "endpoint": {}, "node": {}},
	}
	raw, err := json.Marshal(boot)
	if err != nil {
		return false, err
	}
	s.resources = append(s.resources[:i+1:i+1], append([]json.RawMessage{raw}, s.resources[i+1:]...)...)
	s.urns = append(s.urns[:i+1:i+1], append([]string{bootURN}, s.urns[i+1:]...)...)
	return true, nil
}
