package cancelfile_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/internal/cancelfile"
)

// The context ends once the file exists, not before.
func TestWatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cancelled")
	ctx := cancelfile.Watch(context.Background(), path, 5*time.Millisecond)
	select {
	case <-ctx.Done():
		t.Fatal("cancelled before the file exists")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not cancelled once the file exists")
	}
}

// The program's context ends on the SIGINT that the Go language host of
// Pulumi CLI 3.229 and later sends when the run is cancelled, and the
// process lives on (a program that did not catch it would die at once).
func TestForProgramEndsOnInterrupt(t *testing.T) {
	t.Setenv(cancelfile.Env, "")
	ctx := cancelfile.ForProgram()
	select {
	case <-ctx.Done():
		t.Fatal("cancelled before any signal")
	case <-time.After(20 * time.Millisecond):
	}
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not cancelled by SIGINT")
	}
}
