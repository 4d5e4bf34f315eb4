package stacks_test

import (
	"slices"

	"github.com/fluodata/talos-pulumi/stacks"
)

// limitsInvalidCases are the number bounds (an explicit 0 where a default
// would fill it, more than Proxmox VE takes), MAC spellings and image URLs
// with a query string.
func limitsInvalidCases() []invalidCase {
	return slices.Concat(boundsInvalidCases(), macInvalidCases(), imageURLInvalidCases())
}

// proxmoxWith and vpsWith change one key of a base config.
func proxmoxWith(set func(k keys)) func() stacks.Source {
	return func() stacks.Source {
		k := proxmoxKeys()
		set(k)
		return proxmoxSource(k)
	}
}

func vpsWith(set func(k keys)) func() stacks.Source {
	return func() stacks.Source {
		k := vpsKeys()
		set(k)
		return vpsSource(k)
	}
}
