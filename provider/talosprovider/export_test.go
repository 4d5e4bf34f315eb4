package talosprovider

// DevVersionOf is devVersion, for the tests.
var DevVersionOf = devVersion

// The components' tokens in the package, for the tests.
const (
	TalosToken   = talosToken
	ProxmoxToken = proxmoxToken
	VpsToken     = vpsToken
)
