// Package clitest prepares an integration test for the real Pulumi CLI
// (`make integration`, ../shared/harness): the same skip and the same
// throwaway backend in every test, so that a test says only what it checks.
package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Passphrase is the passphrase of the stacks Backend makes.
const Passphrase = "integration-test"

// Backend skips t where the pulumi CLI is not on PATH, saying what was not
// checked (unchecked: "the refresh cycle was not run with the real
// provider"). Otherwise it points the CLI at a file backend in a fresh
// directory, with Passphrase for the secrets, and returns the directory
// (the backend is its state/ folder; a test may use the rest as its
// work directory).
func Backend(t *testing.T, unchecked string) string {
	t.Helper()
	if _, err := exec.LookPath("pulumi"); err != nil {
		t.Skipf("SKIPPED: the pulumi CLI is not on PATH (../shared/harness), so %s", unchecked)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatalf("unable to create the backend: %v", err)
	}
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", Passphrase)
	t.Setenv("PULUMI_BACKEND_URL", "file://"+state)
	return dir
}
