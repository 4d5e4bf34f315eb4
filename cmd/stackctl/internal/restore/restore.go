package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/fluodata/talos-pulumi/cmd/stackctl/internal/backup"
	"github.com/fluodata/talos-pulumi/internal/privatefile"
	"github.com/fluodata/talos-pulumi/internal/progress"
	"github.com/fluodata/talos-pulumi/internal/talosapi"
)

// API is what a restore asks the nodes through the Talos API:
// *talosapi.Client.
type API interface {
	backup.Recoverer
	ServiceList(ctx context.Context, node string) ([]talosapi.Service, error)
	EtcdStatus(ctx context.Context, node string) (talosapi.EtcdMemberStatus, error)
	ResetEphemeral(ctx context.Context, node string) error
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
	// ResetControlPlanes: when etcd runs on the stack's control planes
	// without quorum (no member has a leader for QuorumWindow), their
	// EPHEMERAL is reset and etcd recovered from the backup; the workers
	// are not touched (Talos's disaster recovery). Without it, a running
	// etcd is never recovered over.
	ResetControlPlanes bool
}

// defaultQuorumWindow is how long no etcd member may report a leader
// before the control planes are taken for having lost their quorum: an
// election takes about a second, so a leaderless moment is not a loss.
const defaultQuorumWindow = 15 * time.Second

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
	// QuorumWindow is how long no member may have a leader before a
	// ResetControlPlanes restore resets the control planes (default
	// defaultQuorumWindow).
	QuorumWindow time.Duration
	// Journal is the file where a restore records that it started a
	// recovery (the snapshot uploaded, the bootstrap from it asked for),
	// so that a run again waits for that recovery instead of uploading
	// over the file Talos may be restoring from; none when empty.
	Journal string
}

// journal is what Env.Journal holds.
type journal struct {
	Stack    string    `json:"stack"`
	Node     string    `json:"node"`
	Backup   time.Time `json:"backup"`
	Snapshot string    `json:"snapshotSha256"`
	Started  time.Time `json:"started"`
}

// readJournal reads the journal of a started recovery; nil when there is
// none.
func readJournal(path string) (*journal, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path) //nolint:gosec // the restore's own journal, beside the stack's access files
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("unable to read the restore's journal: %w", err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("unable to read the restore's journal %s: %w", path, err)
	}
	return &j, nil
}

// writeJournal records j in path (0600, in a 0700 directory), atomically.
func writeJournal(path string, j journal) error {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("unable to write the restore's journal: %w", err)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := privatefile.Write(path, b); err != nil {
		return fmt.Errorf("unable to write the restore's journal: %w", err)
	}
	return nil
}

// resumes tells whether the journal j is of a recovery from this backup
// into this stack's first control plane; a journal of another recovery is
// refused: its snapshot may be what Talos restores from now.
func (j *journal) resumes(m backup.Manifest, stack, first, path string) (bool, error) {
	if j == nil {
		return false, nil
	}
	if j.Stack == stack && j.Node == first && j.Backup.Equal(m.Created) && j.Snapshot == m.Snapshot.SHA256 {
		return true, nil
	}
	return false, fmt.Errorf("a recovery of %s from the backup of %s was started at %s (journal %s), and etcd runs on no control plane yet: "+
		"this backup (of %s) is not uploaded over it; wait for that recovery, or, once `talosctl -n %s service etcd` says it failed, remove the journal and run make restore again",
		j.Node, j.Backup.Format(time.RFC3339), j.Started.Format(time.RFC3339), path, m.Created.Format(time.RFC3339), j.Node)
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
	// Reset are the control planes whose EPHEMERAL was reset
	// (ResetControlPlanes).
	Reset []string
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
		return res, endJournal(env, err)
	}
	if len(running) > 0 && req.ResetControlPlanes {
		if err := resetControlPlanes(ctx, api, req.Target.ControlPlanes, env, m); err != nil {
			return res, err
		}
		res.Reset = slices.Clone(req.Target.ControlPlanes)
		if err := waitPreparing(ctx, api, req.Target.ControlPlanes, env); err != nil {
			return res, err
		}
		running = nil
	}
	first := req.Target.ControlPlanes[0]
	if len(running) > 0 {
		res.Running = running
		logf("etcd runs on %s already: nothing is recovered, a restore never writes over a running etcd (with its quorum lost, make restore CONTROL_PLANES=1 resets the control planes and recovers them from the backup, the workers untouched)", strings.Join(running, ", "))
	} else {
		j, err := readJournal(env.Journal)
		if err != nil {
			return res, err
		}
		resume, err := j.resumes(m, req.Stack, first, env.Journal)
		if err != nil {
			return res, err
		}
		rec, err := backup.RecoverWith(ctx, api, req.Backup, req.Target, env.Log, env.ProgressEvery, backup.RecoverOptions{
			Resume: resume,
			Started: func(node string) error {
				return writeJournal(env.Journal, journal{Stack: req.Stack, Node: node, Backup: m.Created, Snapshot: m.Snapshot.SHA256, Started: time.Now().UTC()})
			},
		})
		if err != nil {
			return res, endJournal(env, err)
		}
		res.Recovered = rec
		logf("etcd recovered in %s: members %s", rec.Took.Round(time.Millisecond), strings.Join(rec.Members, ", "))
	}
	if env.Journal != "" {
		if err := os.Remove(env.Journal); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("unable to remove the restore's journal: %w", err)
		}
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

// endJournal removes the journal when err says etcd Failed: the recovery
// the journal records is over, and the next run, once the node is wiped,
// uploads the snapshot again instead of waiting for it.
func endJournal(env Env, err error) error {
	if !errors.Is(err, backup.ErrEtcdFailed) || env.Journal == "" {
		return err
	}
	if rerr := os.Remove(env.Journal); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return errors.Join(err, fmt.Errorf("unable to remove the restore's journal: %w", rerr))
	}
	return err
}

// etcdRuns waits until every control plane answers and says whether its
// etcd service runs, and returns those where it does (or is stopping): a
// recovery is only safe where none does, and only once every one waits for
// a bootstrap (etcd Preparing, as Talos's disaster recovery requires). A
// control plane that does not answer, has no etcd service yet, or whose
// etcd is in any other state (Starting, Waiting, Finished) is waited for,
// saying so every ProgressEvery: a recovery beside a live etcd member would
// start a second cluster. A Failed etcd ends the wait (pollEtcd).
func etcdRuns(ctx context.Context, api API, controlPlanes []string, env Env) ([]string, error) {
	running, err := pollEtcd(ctx, api, controlPlanes, env,
		fmt.Sprintf("every control plane (%s) to say whether its etcd runs", strings.Join(controlPlanes, ", ")),
		func(state string) (bool, string) {
			switch state {
			case "Running", "Stopping":
				return true, ""
			case "Preparing":
				// Waiting for a bootstrap: what Talos's disaster
				// recovery asks of every control plane.
				return false, ""
			case "Starting":
				return false, "etcd is starting"
			case "":
				return false, "no etcd service yet (a recovery needs it Preparing)"
			}
			return false, "etcd is " + state + " (a recovery needs it Preparing, waiting for a bootstrap)"
		})
	if err != nil {
		return nil, fmt.Errorf("unable to tell whether etcd runs, nothing was recovered: %w", err)
	}
	return running, nil
}

// pollEtcd asks every control plane for its etcd service's state until
// judge decides on each (its second result, when not empty, says what is
// still awaited there), reporting what it waits for (what) every
// ProgressEvery; it returns those judge found running.
func pollEtcd(ctx context.Context, api API, controlPlanes []string, env Env, what string, judge func(state string) (running bool, awaited string)) ([]string, error) {
	var running []string
	var failed error
	wait := progress.Poll{
		What: what, Interval: pollInterval, Timeout: etcdTimeout,
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
			if svc := etcdService(services); svc.State == "Failed" {
				// Talos does not restart an etcd whose pre stage
				// failed (a restore that did not take) before the
				// node reboots: waiting would wait for nothing.
				failed = backup.EtcdFailed(cp, svc.LastEvent)
				return true, nil
			}
			isRunning, awaited := judge(etcdService(services).State)
			if awaited != "" {
				undecided = append(undecided, cp+": "+awaited)
			} else if isRunning {
				running = append(running, cp)
			}
		}
		if len(undecided) > 0 {
			return false, errors.New(strings.Join(undecided, "; "))
		}
		return true, nil
	})
	if err == nil {
		err = failed
	}
	return running, err
}

// etcdService is the etcd service among a node's services (its State ""
// when there is none, as before its first start).
func etcdService(services []talosapi.Service) talosapi.Service {
	for _, s := range services {
		if s.ID == "etcd" {
			return s
		}
	}
	return talosapi.Service{}
}

// resetControlPlanes is the first step of Talos's disaster recovery of the
// control planes: once no etcd member has reported a leader for the whole
// quorum window (asked every pollInterval), each control plane's EPHEMERAL
// is reset and it reboots with its machine config, its etcd then waiting
// for the recovery. A member with a leader refuses it all: the quorum
// holds, and a recovery would roll the cluster back to the backup.
func resetControlPlanes(ctx context.Context, api API, controlPlanes []string, env Env, m backup.Manifest) error {
	window := env.QuorumWindow
	if window <= 0 {
		window = defaultQuorumWindow
	}
	logf := func(format string, a ...any) { _, _ = fmt.Fprintf(env.Log, format+"\n", a...) }
	logf("checking for %s that no etcd member of %s has a leader (quorum lost) before resetting the control planes", window, strings.Join(controlPlanes, ", "))
	deadline := time.Now().Add(window)
	for {
		for _, cp := range controlPlanes {
			st, err := api.EtcdStatus(ctx, cp)
			if err == nil && st.Leader != 0 {
				return fmt.Errorf("etcd on %s has a leader: the quorum holds, so nothing is reset (a recovery would roll the cluster back to the backup of %s); leave CONTROL_PLANES out",
					cp, m.Created.Format(time.RFC3339))
			}
		}
		if !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped before resetting the control planes: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
	for _, cp := range controlPlanes {
		logf("resetting the EPHEMERAL partition (etcd's data) of control plane %s; it reboots with its machine config", cp)
		if err := api.ResetEphemeral(ctx, cp); err != nil {
			return err
		}
	}
	return nil
}

// waitPreparing waits until every reset control plane is back with its
// etcd Preparing (waiting for the recovery), saying what it waits for.
func waitPreparing(ctx context.Context, api API, controlPlanes []string, env Env) error {
	_, err := pollEtcd(ctx, api, controlPlanes, env,
		fmt.Sprintf("the reset control planes (%s) to reboot with etcd waiting for the recovery (Preparing)", strings.Join(controlPlanes, ", ")),
		func(state string) (bool, string) {
			if state != "Preparing" {
				return false, fmt.Sprintf("etcd is %q", state)
			}
			return false, ""
		})
	if err != nil {
		return fmt.Errorf("the control planes were reset, but etcd does not wait for the recovery on all of them (run make restore again once they answer): %w", err)
	}
	return nil
}
