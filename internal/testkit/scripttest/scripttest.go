// Package scripttest writes the executable scripts tests run as stand-ins
// for other programs (a fake pulumi), without the race that makes running
// one fail with "text file busy".
package scripttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Write puts an executable script with content at path. A file this
// process writes is open for writing in every child a parallel test forks
// meanwhile, until that child execs, and Linux refuses to run a file open
// for writing (ETXTBSY, golang/go#22315). So the content is written to a
// file that is never run, and install(1), another process, makes the
// executable from it: no descriptor of this process ever writes the script.
func Write(t testing.TB, path, content string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), filepath.Base(path)+".src")
	if err := os.WriteFile(src, []byte(content), 0o600); err != nil {
		t.Fatalf("unable to write the script %s: %v", path, err)
	}
	if out, err := exec.Command(installTool(), "-m", "0700", src, path).CombinedOutput(); err != nil { //nolint:gosec // the test's own paths
		t.Fatalf("unable to install the script %s: %v: %s", path, err, out)
	}
}

// installTool is coreutils' install(1): at its usual place, so that a test
// that put its own doubles first on PATH still finds it, else on PATH.
func installTool() string {
	if _, err := os.Stat("/usr/bin/install"); err == nil {
		return "/usr/bin/install"
	}
	return "install"
}
