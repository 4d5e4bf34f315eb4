package driver_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/driver"
	"github.com/fluodata/talos-pulumi/internal/testkit/scripttest"
)

// fakePulumiScript behaves like the CLI on an interrupt: it notes each
// SIGINT, finishes its work and exits; it also notes whether it leads its
// own process group.
const fakePulumiScript = `#!/bin/bash
if [ "$1" = version ]; then echo v3.259.0; exit 0; fi
dir=$(dirname "$0")
echo "$@" > "$dir/args"
read -r _ _ _ _ pgrp _ < /proc/$$/stat
[ "$pgrp" = $$ ] && echo leader > "$dir/pgrp" || echo member > "$dir/pgrp"
trap 'echo INT >> "$dir/signals"; sleep 0.3; echo "state saved, lock released"; exit 255' INT
echo "Updating (prod):"
touch "$dir/started"
while :; do sleep 0.1; done
`

func fakeCLI(t *testing.T) (string, *driver.CLI) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "pulumi")
	scripttest.Write(t, path, fakePulumiScript)
	cli, err := driver.NewCLI(context.Background(), path, 20*time.Second)
	require.NoError(t, err)
	return dir, cli
}

func TestCLIReadsItsVersion(t *testing.T) {
	t.Parallel()
	_, cli := fakeCLI(t)
	assert.Equal(t, "3.259.0", cli.Version().String())
	_, err := driver.NewCLI(context.Background(), filepath.Join(t.TempDir(), "nope"), time.Second)
	assert.Error(t, err)
}

// A cancelled operation sends pulumi exactly one interrupt (a second one
// would make it quit without saving) and waits for it to save its state;
// pulumi runs in its own process group, so a terminal's Ctrl-C does not
// reach it directly as well.
func TestCLICancelSendsOneInterruptAndWaits(t *testing.T) {
	t.Parallel()
	dir, cli := fakeCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var code int
	var err error
	go func() {
		defer close(done)
		_, _, code, err = cli.Run(ctx, dir, nil, nil, nil, []string{"PULUMI_BACKEND_URL=file:///x"}, "up", "--yes")
	}()
	require.Eventually(t, func() bool { _, e := os.Stat(filepath.Join(dir, "started")); return e == nil }, 10*time.Second, 20*time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	require.Error(t, err)
	assert.Equal(t, 255, code)
	signals, rerr := os.ReadFile(filepath.Join(dir, "signals"))
	require.NoError(t, rerr)
	assert.Equal(t, "INT\n", string(signals), "exactly one interrupt")
	pgrp, _ := os.ReadFile(filepath.Join(dir, "pgrp"))
	assert.Equal(t, "leader\n", string(pgrp), "pulumi leads its own process group")
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	assert.Equal(t, "up --yes --non-interactive\n", string(args))
}

func TestCLIStreamsOutput(t *testing.T) {
	t.Parallel()
	dir, cli := fakeCLI(t)
	var live strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, e := os.Stat(filepath.Join(dir, "started")); e == nil {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	stdout, _, _, _ := cli.Run(ctx, dir, nil, []io.Writer{&live}, nil, nil, "preview")
	assert.Contains(t, live.String(), "Updating (prod):")
	assert.Contains(t, stdout, "state saved, lock released")
}
