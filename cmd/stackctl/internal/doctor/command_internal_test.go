package doctor

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The command quotes the directory itself, not only because validation
// refuses quotes in it: with quotes, a newline, $(...) and backticks in the
// name, a local sh still tests exactly that directory and runs nothing.
func TestDNSMasqCheckCommandQuotesAnyDirectory(t *testing.T) {
	t.Parallel()
	fakeBin := t.TempDir()
	scripttest.Write(t, filepath.Join(fakeBin, "dnsmasq"), "#!/bin/sh\n")
	for _, name := range []string{"plain", "it's", `'; touch pwned; '`, `"; touch pwned; "`, "$(touch pwned)", "`touch pwned`", "a\nb; touch pwned", `\`, "-n"} {
		scratch := t.TempDir()
		dir := filepath.Join(scratch, name)
		run := func() string {
			cmd := exec.Command("sh", "-c", dnsmasqCheckCommand(dir))
			cmd.Dir = scratch
			cmd.Env = append(os.Environ(), "PATH="+fakeBin+":"+os.Getenv("PATH"))
			out, _ := cmd.CombinedOutput()
			return string(out)
		}
		assert.Equal(t, "no directory "+dir+"\n", run(), "%q", name)
		require.NoError(t, os.Mkdir(dir, 0o755))
		assert.Equal(t, "ready\n", run(), "%q", name)
		assert.NoFileExists(t, filepath.Join(scratch, "pwned"), "%q ran as code", name)
	}
}
