// Package drivertest is a fake Pulumi CLI for the driver's tests: an
// auto.PulumiCommand that answers the commands the Automation API runs the
// way pulumi 3.259 does, records every call, and can fail, lock or block.
package drivertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Call is one recorded CLI invocation.
type Call struct {
	Args    []string
	Env     []string
	WorkDir string
}

// Pulumi is the fake CLI. Zero values mean: the stack exists, operations
// succeed with Changes, outputs are Outputs.
type Pulumi struct {
	// Stacks that exist (select succeeds); `stack init` adds to it.
	Stacks []string
	// Config is what `pulumi config --show-secrets --json` prints.
	Config []byte
	// Changes are the resource changes an operation reports.
	Changes map[string]int
	// Outputs are the stack outputs (name -> value); Secret names secret ones.
	Outputs map[string]any
	Secret  []string
	// State is what `pulumi stack export` prints; nil is a stack holding
	// one resource of a provider (a VM).
	State []byte
	// Fail makes the named operation (preview, up, ...) exit 255 with Stderr.
	Fail   string
	Stderr string
	// Block makes the named operation wait until its context is cancelled,
	// after closing Started.
	Block   string
	Started chan struct{}

	mu    sync.Mutex
	calls []Call
}

// Version implements auto.PulumiCommand: 3.219, the oldest CLI the project
// supports. From 3.206 on, the Automation API takes the engine events over
// gRPC (--event-log tcp://...), and has them all when the command returns.
// Up to 3.205 it tailed a file, and lost the summary now and then when the
// command exited right after writing it, as this fake does: a preview then
// failed with "failed to get preview summary".
func (p *Pulumi) Version() semver.Version { return semver.MustParse("3.259.0") }

// Calls returns the recorded invocations.
func (p *Pulumi) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// Find returns the first call whose arguments start with prefix.
func (p *Pulumi) Find(prefix ...string) (Call, bool) {
	for _, c := range p.Calls() {
		if len(c.Args) >= len(prefix) && slices.Equal(c.Args[:len(prefix)], prefix) {
			return c, true
		}
	}
	return Call{}, false
}

// Run implements auto.PulumiCommand.
func (p *Pulumi) Run(ctx context.Context, workdir string, _ io.Reader, out, errOut []io.Writer, env []string, args ...string) (string, string, int, error) {
	p.mu.Lock()
	p.calls = append(p.calls, Call{Args: slices.Clone(args), Env: slices.Clone(env), WorkDir: workdir})
	p.mu.Unlock()
	stdout := io.MultiWriter(out...)
	stackArg := flagValue(args, "--stack")

	switch {
	case has(args, "stack", "select"):
		if !slices.Contains(p.Stacks, stackArg) {
			return "", fmt.Sprintf("error: no stack named '%s' found\n", stackArg), 255, fmt.Errorf("exit status 255")
		}
		return "", "", 0, nil
	case has(args, "stack", "init"):
		name := args[2]
		if slices.Contains(p.Stacks, name) {
			return "", fmt.Sprintf("error: stack '%s' already exists\n", name), 255, fmt.Errorf("exit status 255")
		}
		p.mu.Lock()
		p.Stacks = append(p.Stacks, name)
		p.mu.Unlock()
		return "", "", 0, nil
	case has(args, "config"):
		return string(p.Config), "", 0, nil
	case has(args, "stack", "output"):
		shown := map[string]any{}
		for k, v := range p.Outputs {
			if !slices.Contains(args, "--show-secrets") && slices.Contains(p.Secret, k) {
				v = "[secret]" // as the CLI shows a secret of any type
			}
			shown[k] = v
		}
		raw, _ := json.Marshal(shown)
		return string(raw), "", 0, nil
	case has(args, "stack", "export"):
		if p.State == nil {
			return `{"version":3,"deployment":{"resources":[{"urn":"urn:pulumi:prod::talos-cluster::pulumi:pulumi:Stack::talos-cluster-prod","custom":false,"type":"pulumi:pulumi:Stack"},` +
				`{"urn":"urn:pulumi:prod::talos-cluster::proxmoxve:VM/virtualMachine:VirtualMachine::homelab-vm-cp-0","custom":true,"type":"proxmoxve:VM/virtualMachine:VirtualMachine"}]}}`, "", 0, nil
		}
		return string(p.State), "", 0, nil
	case has(args, "stack", "history"):
		raw, _ := json.Marshal([]map[string]any{{
			"kind": "update", "result": "succeeded", "message": "", "environment": map[string]string{}, "config": map[string]any{},
			"startTime": time.Now().Format(time.RFC3339), "endTime": time.Now().Format(time.RFC3339),
			"resourceChanges": p.Changes,
		}})
		return string(raw), "", 0, nil
	}

	op := args[0]
	if p.Block == op {
		if p.Started != nil {
			close(p.Started)
		}
		<-ctx.Done()
		return "", "^C received; cancelling\n", 255, ctx.Err()
	}
	_, _ = fmt.Fprintf(stdout, "Previewing %s (%s):\n", op, stackArg)
	if p.Fail == op {
		for _, w := range errOut {
			_, _ = io.WriteString(w, p.Stderr)
		}
		return "", p.Stderr, 255, fmt.Errorf("exit status 255")
	}
	if events := flagValue(args, "--event-log"); events != "" {
		ev, _ := json.Marshal(map[string]any{"sequence": 1, "timestamp": time.Now().Unix(),
			"summaryEvent": map[string]any{"maybeCorrupt": false, "durationSeconds": 1, "resourceChanges": p.Changes, "policyPacks": map[string]string{}}})
		if err := sendEvents(ctx, events, string(ev)); err != nil {
			return "", err.Error(), 255, err
		}
	}
	_, _ = fmt.Fprintf(stdout, "Resources: %v\n", p.Changes)
	return "done\n", "", 0, nil
}

// sendEvents streams engine events (JSON) to the Automation API's events
// server at addr, "tcp://localhost:PORT", as the CLI does, and returns once
// the server has them all.
func sendEvents(ctx context.Context, addr string, events ...string) error {
	target, ok := strings.CutPrefix(addr, "tcp://")
	if !ok {
		return fmt.Errorf("--event-log %s: the fake speaks only the events server (tcp://host:port)", addr)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	stream, err := pulumirpc.NewEventsClient(conn).StreamEvents(ctx)
	if err != nil {
		return err
	}
	for _, ev := range events {
		if err := stream.Send(&pulumirpc.EventRequest{Event: ev}); err != nil {
			return err
		}
	}
	_, err = stream.CloseAndRecv()
	return err
}

// has reports whether args start with the given words.
func has(args []string, words ...string) bool {
	return len(args) >= len(words) && slices.Equal(args[:len(words)], words)
}

// flagValue finds "--name value" or "--name=value".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
