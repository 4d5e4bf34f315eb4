package proxmox

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

const testSchematic = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"

func homelabISO() ISOFile {
	return ISOFile{Stack: "proxmox-homelab", Cluster: "homelab", TalosVersion: "v1.12.4", SchematicID: testSchematic, Platform: "metal"}
}

// pveAccepts reports whether Proxmox stores an ISO under exactly this name:
// download-url's filename (at most 255 characters, the .iso/.img extension)
// unchanged by normalize_content_filename.
func pveAccepts(name string) bool {
	return len(name) <= 255 && regexp.MustCompile(`(?i)^[^/]+\.(?:iso|img)$`).MatchString(name) &&
		!regexp.MustCompile(`[^a-zA-Z0-9_.-]`).MatchString(name)
}

func TestISOFileNameSaysWhoseAndWhat(t *testing.T) {
	t.Parallel()
	name := ISOFileName(homelabISO())
	assert.Regexp(t, `^talos-v1\.12\.4-ce4c980550dd-metal-proxmox-homelab-homelab-[0-9a-f]{8}-amd64\.iso$`, name)
	assert.Equal(t, name, ISOFileName(homelabISO()), "a pure function: the same name on every run")
	assert.True(t, pveAccepts(name), name)
}

func TestISOFileNameDiffersPerStackAndContent(t *testing.T) {
	t.Parallel()
	variants := map[string]func(f *ISOFile){
		"stack":            func(f *ISOFile) { f.Stack = "proxmox-staging" },
		"cluster":          func(f *ISOFile) { f.Cluster = "lab" },
		"version":          func(f *ISOFile) { f.TalosVersion = "v1.12.5" },
		"schematic":        func(f *ISOFile) { f.SchematicID = testSchematic[:12] + "ffff" },
		"platform":         func(f *ISOFile) { f.Platform = "nocloud" },
		"split a-b|c":      func(f *ISOFile) { f.Stack, f.Cluster = "a-b", "c" },
		"split a|b-c":      func(f *ISOFile) { f.Stack, f.Cluster = "a", "b-c" },
		"reduced a_b":      func(f *ISOFile) { f.Stack = "a_b" },
		"reduced a/b":      func(f *ISOFile) { f.Stack = "a/b" },
		"long stack, ...x": func(f *ISOFile) { f.Stack = strings.Repeat("s", 60) + "x" },
		"long stack, ...y": func(f *ISOFile) { f.Stack = strings.Repeat("s", 60) + "y" },
	}
	seen := map[string]string{ISOFileName(homelabISO()): "base"}
	for what, change := range variants {
		f := homelabISO()
		change(&f)
		name := ISOFileName(f)
		if other, dup := seen[name]; dup {
			t.Errorf("%s and %s share the name %s", what, other, name)
		}
		seen[name] = what
		assert.True(t, pveAccepts(name), "%s: %s", what, name)
	}
}

func TestISOFileNameIsBoundedAndSafe(t *testing.T) {
	t.Parallel()
	// Pulumi stack names may be up to 100 characters; a version's pre-release
	// part has no bound in the stack validation.
	f := ISOFile{
		Stack: strings.Repeat("my.stack_", 12), Cluster: strings.Repeat("c", 63),
		TalosVersion: "v1.13.0-" + strings.Repeat("alpha.", 40), SchematicID: testSchematic, Platform: "nocloud",
	}
	name := ISOFileName(f)
	assert.True(t, pveAccepts(name), name)
	assert.LessOrEqual(t, len(name), 255)
	f.Stack = "weird stack/ä"
	assert.True(t, pveAccepts(ISOFileName(f)), ISOFileName(f))
}
