package stacks

// platformRules are what the stack file itself knows of one platform: the
// defaults of its own, the keys that copy others, and its checks (the
// components' rules are theirs: program.Validate). A new platform is one
// entry in byPlatform and its name in Platforms.
type platformRules struct {
	// defaults fills the platform's keys the file defaults itself.
	defaults func(cfg *Config)
	// resolve fills the keys that copy another, already validated key.
	resolve func(cfg *Config)
	// explicitZeros refuses a 0 given where leaving the key out fills it.
	explicitZeros func(d *Diagnostics, cfg *Config)
	// addresses checks the host names of the platform's keys.
	addresses func(d *Diagnostics, cfg *Config)
	// validate checks the platform's section and refuses the others'.
	validate func(d *Diagnostics, cfg *Config)
	// validateNode checks a node's keys of the platform and refuses the
	// others'; macs collects the MACs given, for duplicates.
	validateNode func(d *Diagnostics, ref NodeRef, macs map[string]string)
}

// byPlatform are the platforms' rules by name.
var byPlatform = map[Platform]platformRules{
	PlatformProxmox: {
		defaults: proxmoxDefaults, resolve: proxmoxResolve, explicitZeros: proxmoxExplicitZeros,
		addresses: proxmoxAddresses, validate: validateProxmoxStack, validateNode: validateProxmoxStackNode,
	},
	PlatformVPS: {
		defaults: vpsDefaults, resolve: vpsResolve, explicitZeros: vpsExplicitZeros,
		addresses: vpsAddresses, validate: validateVPSStack, validateNode: validateVPSStackNode,
	},
	PlatformLocal: {
		defaults: localDefaults, resolve: func(*Config) {}, explicitZeros: localExplicitZeros,
		addresses: func(*Diagnostics, *Config) {}, validate: validateLocalStack, validateNode: validateLocalStackNode,
	},
}

// rulesOf are p's rules; for a platform the file does not know (refused by
// validate), rules that do nothing.
func rulesOf(p Platform) platformRules {
	if r, ok := byPlatform[p]; ok {
		return r
	}
	return platformRules{
		defaults: func(*Config) {}, resolve: func(*Config) {},
		explicitZeros: func(*Diagnostics, *Config) {}, addresses: func(*Diagnostics, *Config) {},
		validate: func(*Diagnostics, *Config) {}, validateNode: func(*Diagnostics, NodeRef, map[string]string) {},
	}
}
