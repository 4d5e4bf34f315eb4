package servers

import (
	_ "embed" // the install script is a file in the repo, run as it is
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/fluodata/talos-pulumi/internal/shell"
)

// InstallScript writes a Talos disk image to a disk from a rescue system.
//
//go:embed install.sh
var InstallScript string

// TalosAPIPort is where Talos's API (apid, or the maintenance service before
// the first config) listens.
const TalosAPIPort = constants.ApidPort

// Install is one node's install: what the script needs to know.
type Install struct {
	Disk          string
	ImageURL      string
	RequireRescue bool
}

// Vars are the script's variables.
func (i Install) Vars() map[string]string {
	rescue := "0"
	if i.RequireRescue {
		rescue = "1"
	}
	return map[string]string{"TARGET": i.Disk, "IMAGE_URL": i.ImageURL, "REQUIRE_RESCUE": rescue}
}

// Stdin is what `bash -s` reads over SSH: the variables, then the script.
// Variables travel in the script rather than as SSH environment because
// rescue systems' sshd rarely accepts SetEnv.
func (i Install) Stdin() string {
	return Preamble(i.Vars()) + InstallScript
}

// Preamble assigns shell variables, sorted, values single-quoted.
func Preamble(vars map[string]string) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, shell.Quote(vars[k]))
	}
	return b.String()
}

// Wait is one node's wait for its Talos API.
type Wait struct {
	NodeName, NodeIP string
	Timeout          time.Duration
	// TimeoutLabel is the timeout as the stack spells it.
	TimeoutLabel string
	// Hint tells the operator what must happen now.
	Hint string
}

// Env is the wait's environment: the wait resource's inputs, which its
// hook reads (RunWait).
func (w Wait) Env() map[string]string {
	return map[string]string{
		"NODE_NAME":    w.NodeName,
		"NODE_IP":      w.NodeIP,
		"TALOS_PORT":   fmt.Sprint(TalosAPIPort),
		"WAIT_TIMEOUT": fmt.Sprint(int(w.Timeout.Seconds())),
		"WAIT_LABEL":   w.TimeoutLabel,
		"HINT":         w.Hint,
	}
}

// ManualRebootHint is what the operator must do when no reboot command is
// configured.
func ManualRebootHint(node, ip, disk string) string {
	return fmt.Sprintf("%s (%s) has Talos on %s. Now switch its boot from the rescue system to its disk "+
		"in your provider's console (OVH: Netboot -> Boot from the hard disk) and reboot it; "+
		"or set vps.rebootCommand to do this for you.", node, ip, disk)
}

// CommandRebootHint says that vps.rebootCommand is taking care of it.
func CommandRebootHint(node string) string {
	return fmt.Sprintf("vps.rebootCommand ran for %s; waiting for it to boot Talos from its disk.", node)
}
