package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/internal/progress"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// API is what a restore asks the nodes through the Talos API:
// *talosapi.Client.
type API interface {
	backup.Recoverer
	ServiceList(ctx context.Context, node string) ([]talosapi.Service, error)
}

// How long a restore waits for every control plane to say whether its etcd
// runs (the machines may still be installing and rebooting), asking every
// pollInterval.
const (
	pollInterval = time.Second
	etcdTimeout  = 20 * time.Minute
)

// Stack is what a restore does with the stack: auto.Stack.
type Stack interface {
	Export(ctx context.Context) (apitype.UntypedDeployment, error)
	Import(ctx context.Context, state apitype.UntypedDeployment) error
	Outputs(ctx context.Context) (auto.OutputMap, error)
}

// Request is one restore.
type Request struct {
	// Stack is the stack's name.
	Stack string
	// Target is the cluster the stack file describes: its name, Talos
	// version and control planes (the first is bootstrapped).
	Target backup.Target
	// Backup is the backup, extracted and checked (backup.Extract).
	Backup backup.Extracted
}

// Env is how a restore runs the program and reaches the nodes.
type Env struct {
	Stack Stack
	// Up runs the program's `up`; the resources of exclude and their
	// dependents stay as the state has them (pulumi up --exclude
	// --exclude-dependents); none excluded is a whole `up`.
	Up func(ctx context.Context, exclude []string) error
	// Talos opens the Talos API with the stack's talosconfig; close ends
	// it.
	Talos func(talosconfig string) (api API, closeAPI func(), err error)
	// Log says what is done, and what a wait waits for every ProgressEvery.
	Log           io.Writer
	ProgressEvery time.Duration
}

// Result is what a restore did.
type Result struct {
	// Seeded is the state the restore started from; nil when the stack had
	// it already (a restore run again after an interruption).
	Seeded *Seeded
	// Recovered is etcd once the control planes joined; Running are the
	// control planes whose etcd ran already, so nothing was recovered.
	Recovered backup.Recovered
	Running   []string
}

// Run restores the stack's cluster from the backup: the state seeded from
// the backup's (Seed), an `up` of everything but the bootstrap and what
// needs etcd (the machines and their configs), etcd recovered from the
// snapshot on the first control plane (backup.Recover), then a whole `up`
// (the waits, the releases as etcd has them). A backup that does not fit
// the stack is refused before anything changes; the stack's Talos CA must
// be the backup's before the snapshot is sent. Run again after an
// interruption, it goes on where it stopped: the state is not seeded twice
// and a running etcd is never recovered over.
func Run(ctx context.Context, req Request, env Env) (Result, error) {
	m := req.Backup.Manifest
	if m.Stack != req.Stack {
		return Result{}, fmt.Errorf("unable to restore stack %s: the backup is of stack %s", req.Stack, m.Stack)
	}
	if err := backup.CheckFits(m, req.Target); err != nil {
		return Result{}, fmt.Errorf("unable to restore stack %s: %w", req.Stack, err)
	}
	if len(req.Target.ControlPlanes) == 0 {
		return Result{}, fmt.Errorf("unable to restore stack %s: it has no control plane", req.Stack)
	}
	logf := func(format string, a ...any) { _, _ = fmt.Fprintf(env.Log, format+"\n", a...) }

	var res Result
	exported, err := env.Stack.Export(ctx)
	if err != nil {
		return res, fmt.Errorf("unable to export the stack's state: %w", err)
	}
	current, err := json.Marshal(exported)
	if err != nil {
		return res, fmt.Errorf("unable to encode the stack's state: %w", err)
	}
	bootstrap, err := Started(current)
	if err != nil {
		return res, err
	}
	if bootstrap != "" {
		logf("stack %s has %s already (a restore run again, or a live cluster): its state is not seeded again", req.Stack, bootstrap)
	} else {
		seed, err := Seed(current, req.Backup.State, req.Stack)
		if err != nil {
			return res, fmt.Errorf("unable to restore stack %s: %w", req.Stack, err)
		}
		var state apitype.UntypedDeployment
		if err := json.Unmarshal(seed.State, &state); err != nil {
			return res, fmt.Errorf("unable to read the seeded state: %w", err)
		}
		if err := env.Stack.Import(ctx, state); err != nil {
			return res, fmt.Errorf("unable to import the seeded state: %w", err)
		}
		logf("seeded the state from the backup: %d resources kept (the secrets, the bootstrap and what etcd holds), %d made again", len(seed.Kept), seed.Dropped)
		res.Seeded, bootstrap = &seed, seed.Bootstrap
	}

	logf("up without %s and what needs etcd: the machines and their configs", bootstrap)
	if err := env.Up(ctx, []string{bootstrap}); err != nil {
		return res, fmt.Errorf("unable to bring up the machines: %w", err)
	}
	talosconfig, err := talosconfigOf(ctx, env.Stack)
	if err != nil {
		return res, err
	}
	if err := sameCA(m, talosconfig); err != nil {
		return res, err
	}
	api, closeAPI, err := env.Talos(talosconfig)
	if err != nil {
		return res, fmt.Errorf("unable to use the stack's talosconfig: %w", err)
	}
	defer closeAPI()

	running, err := etcdRuns(ctx, api, req.Target.ControlPlanes, env)
	if err != nil {
		return res, err
	}
	if len(running) > 0 {
		res.Running = running
		logf("etcd runs on %s already: nothing is recovered, a restore never writes over a running etcd", strings.Join(running, ", "))
	} else {
		rec, err := backup.Recover(ctx, api, req.Backup, req.Target, env.Log, env.ProgressEvery)
		if err != nil {
			return res, err
		}
		res.Recovered = rec
		logf("etcd recovered in %s: members %s", rec.Took.Round(time.Millisecond), strings.Join(rec.Members, ", "))
	}

	logf("up: the rest of the cluster (the waits, the releases as etcd holds them)")
	if err := env.Up(ctx, nil); err != nil {
		return res, fmt.Errorf("etcd is recovered, but the up after it failed (run make restore again, or make up): %w", err)
	}
	return res, nil
}

// talosconfigOf reads the stack's talosconfig output.
func talosconfigOf(ctx context.Context, s Stack) (string, error) {
	outs, err := s.Outputs(ctx)
	if err != nil {
		return "", fmt.Errorf("unable to read the stack's outputs: %w", err)
	}
	tc, _ := outs["talosconfig"].Value.(string)
	if tc == "" {
		return "", errors.New("the stack has no talosconfig output after the machines came up")
	}
	return tc, nil
}

// sameCA refuses a stack whose Talos CA is not the backup's: its machines
// would not trust what etcd holds. Backups from before the CA was recorded
// are taken as they are.
func sameCA(m backup.Manifest, talosconfig string) error {
	if m.TalosCA == "" {
		return nil
	}
	got, err := backup.TalosCAFingerprint(talosconfig)
	if err != nil {
		return err
	}
	if got != m.TalosCA {
		return fmt.Errorf("the stack's Talos CA (sha256 %s) is not the backup's (%s): its secrets are another cluster's; nothing was sent to a node", got, m.TalosCA)
	}
	return nil
}

// etcdRuns waits until every control plane answers and says whether its
// etcd service runs, and returns those where it does (or is stopping): a
// recovery is only safe where none does. A control plane that does not
// answer, or whose etcd is starting, is waited for, saying so every
// ProgressEvery: a recovery beside a live etcd member would start a second
// cluster.
func etcdRuns(ctx context.Context, api API, controlPlanes []string, env Env) ([]string, error) {
	var running []string
	wait := progress.Poll{
		What:     fmt.Sprintf("every control plane (%s) to say whether its etcd runs", strings.Join(controlPlanes, ", ")),
		Interval: pollInterval, Timeout: etcdTimeout,
		Report: func(msg string) { _, _ = fmt.Fprintln(env.Log, msg) }, Every: env.ProgressEvery,
	}
	err := wait.Until(ctx, func(ctx context.Context) (bool, error) {
		running = running[:0]
		var undecided []string
		for _, cp := range controlPlanes {
			services, err := api.ServiceList(ctx, cp)
			if err != nil {
				undecided = append(undecided, fmt.Sprintf("%s: %v", cp, err))
				continue
			}
			switch state := etcdState(services); state {
			case "Running", "Stopping":
				running = append(running, cp)
			case "Starting":
				undecided = append(undecided, cp+": etcd is starting")
			}
		}
		if len(undecided) > 0 {
			return false, errors.New(strings.Join(undecided, "; "))
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("unable to tell whether etcd runs, nothing was recovered: %w", err)
	}
	return running, nil
}

// etcdState is the state of the etcd service among a node's services ("":
// none, as before its first start).
func etcdState(services []talosapi.Service) string {
	for _, s := range services {
		if s.ID == "etcd" {
			return s.State
		}
	}
	return ""
}
