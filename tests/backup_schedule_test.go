package tests

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
	"github.com/fluodata/talos-pulumi/program"
	"github.com/fluodata/talos-pulumi/program/programtest"
	"github.com/fluodata/talos-pulumi/stacks"
	"github.com/fluodata/talos-pulumi/stacks/stackstest"
)

// proxmoxExampleWith is the Proxmox example's stack file with more config
// appended (YAML under its config:), and secrets set as `pulumi config set
// --secret --path` sets them, besides the example's own.
func proxmoxExampleWith(t *testing.T, more string, secrets map[string]string) stacks.Source {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(stackstest.RepoRoot(t), stackstest.ProxmoxExample))
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "Pulumi.homelab.yaml.example")
	require.NoError(t, os.WriteFile(file, append(raw, []byte(more)...), 0o600))
	all := maps.Clone(secrets)
	maps.Copy(all, stackstest.ExampleSecrets[stackstest.ProxmoxExample])
	return stackstest.StackSource(t, file, all)
}

// The Proxmox example with backup.schedule, as `up` registers it: the
// talos-backup CronJob puts the snapshots under <target prefix>/<stack>/
// in-cluster with the one age key; backup.s3's secret key, set with
// `pulumi config set --secret`, is secret in the Secret that carries it and
// appears in clear in no registered input.
func TestTheBackupScheduleOfAStack(t *testing.T) {
	t.Parallel()
	const key = "s3-Sch3dule-s3cr3t"
	src := proxmoxExampleWith(t, `
  talos-cluster:backup:
    target: s3://backups/talos?endpoint=https://minio.lan:9000&use_path_style=true
    recipients: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]
    schedule: "0 */6 * * *"
    s3:
      accessKeyId: AKIAEXAMPLE
`, map[string]string{"backup.s3.secretAccessKey": key})
	// Machine secrets with a real Talos CA: the snapshots' prefix ends in
	// the cluster instance it names.
	pki := pkitest.New(t, "127.0.0.1")
	e, _, _, err := programtest.RunOn(t, &componentstest.Engine{ClientConfiguration: &componentstest.ClientConfiguration{
		CA: string(pki.CA), Cert: string(pki.ClientCert), Key: string(pki.ClientKey),
	}}, src, "homelab", program.Options{})
	require.NoError(t, err)

	cron := e.One(t, "kubernetes:batch/v1:CronJob")
	assert.Equal(t, "0 */6 * * *", cron.Inputs["spec"].ObjectValue()["schedule"].StringValue())
	env := fmt.Sprint(cron.Inputs["spec"])
	for _, want := range []string{"talos/homelab/in-cluster", "https://minio.lan:9000", "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"} {
		assert.Contains(t, env, want)
	}
	// The target's use_path_style=true, as talos-backup beta.2 reads it
	// (inverted: "false" turns path-style on; issue 35, item B.6).
	assert.Contains(t, env, "USE_PATH_STYLE")
	assert.Regexp(t, `name:\{USE_PATH_STYLE\} value:\{false\}`, env)
	secret := e.One(t, "kubernetes:core/v1:Secret")
	assert.True(t, secret.Inputs["stringData"].ContainsSecrets())
	e.One(t, "kubernetes:talos.dev/v1alpha1:ServiceAccount")
	for _, r := range e.All() {
		for name, v := range r.Inputs {
			if !v.ContainsSecrets() {
				assert.False(t, strings.Contains(fmt.Sprint(v), key), "%s input %s holds the S3 secret key in clear", r.Name, name)
			}
		}
	}
	var cps int
	for _, a := range e.ByType(componentstest.Apply) {
		if strings.Contains(fmt.Sprint(a.Inputs["configPatches"]), "kubernetesTalosAPIAccess") {
			cps++
		}
	}
	assert.Equal(t, 1, cps, "the example's one control plane lets the CronJob reach the Talos API")
}

// backup.s3.caFile (issue 35, item B.7): the program reads the file and the
// cluster's snapshot Job trusts it; a file that cannot be read stops the
// run before anything is registered, naming the key.
func TestTheBackupScheduleTrustsTheStacksCAFile(t *testing.T) {
	t.Parallel()
	pki := pkitest.New(t, "127.0.0.1")
	caFile := filepath.Join(t.TempDir(), "minio-ca.pem")
	require.NoError(t, os.WriteFile(caFile, pki.CA, 0o600))
	section := func(file string) string {
		return `
  talos-cluster:backup:
    target: s3://backups/talos?endpoint=https://minio.lan:9000&use_path_style=true
    recipients: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]
    schedule: "@daily"
    s3:
      accessKeyId: AKIAEXAMPLE
      caFile: ` + file + "\n"
	}
	engine := func() *componentstest.Engine {
		return &componentstest.Engine{ClientConfiguration: &componentstest.ClientConfiguration{CA: string(pki.CA), Cert: string(pki.ClientCert), Key: string(pki.ClientKey)}}
	}
	secrets := map[string]string{"backup.s3.secretAccessKey": "k3y"}
	e, _, _, err := programtest.RunOn(t, engine(), proxmoxExampleWith(t, section(caFile), secrets), "homelab", program.Options{})
	require.NoError(t, err)
	cm := e.One(t, "kubernetes:core/v1:ConfigMap")
	assert.Equal(t, string(pki.CA), cm.Inputs["data"].ObjectValue()["ca.crt"].StringValue())

	missing := engine()
	_, _, _, err = programtest.RunOn(t, missing, proxmoxExampleWith(t, section(caFile+".gone"), secrets), "homelab", program.Options{})
	require.ErrorContains(t, err, "backup.s3.caFile")
	assert.Empty(t, missing.All(), "nothing registered")
}
