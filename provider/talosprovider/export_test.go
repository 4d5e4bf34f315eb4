package talosprovider

import "reflect"

// VersionOf is versionOf, for the tests.
var VersionOf = versionOf

// VersionFile is VERSION's text, for the tests.
var VersionFile = versionFile

// TestServerVersion is the version the tests' provider servers run with
// (the golden schema's).
const TestServerVersion = "0.0.0-dev"

// The components' tokens in the package, for the tests.
const (
	TalosToken   = talosToken
	ProxmoxToken = proxmoxToken
	VpsToken     = vpsToken
	DockerToken  = dockerToken
)

// ResourceArgs are the components' Go arguments by token: the one list of
// the package's components.
var ResourceArgs = resourceArgs

// ComponentOutputs are the components' resource types by token.
var ComponentOutputs = func() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for _, c := range described {
		out[c.token] = c.outputs
	}
	return out
}()
