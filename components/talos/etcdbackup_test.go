package talos_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fluodata/talos-pulumi/components/componentstest"
	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/components/talos"
	"github.com/fluodata/talos-pulumi/internal/certs"
	"github.com/fluodata/talos-pulumi/internal/testkit/pkitest"
)

const (
	tSecret    = "kubernetes:core/v1:Secret"
	tCronJob   = "kubernetes:batch/v1:CronJob"
	tTalosAcct = "kubernetes:talos.dev/v1alpha1:ServiceAccount"
	ageKey     = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"
)

// runWithBackup registers a cluster of ns with the etcd backup settings e
// (none when nil).
func runWithBackup(t *testing.T, ns []talos.NodeSpec, e *talos.EtcdBackupSettings) *componentstest.Engine {
	t.Helper()
	return runWithBackupOn(t, &componentstest.Engine{ClientConfiguration: newClientConfiguration(t)}, ns, e)
}

// newClientConfiguration is machine secrets' client configuration with a
// new Talos CA, which names the cluster's instance: the schedule's prefix
// ends in it.
func newClientConfiguration(t *testing.T) *componentstest.ClientConfiguration {
	t.Helper()
	pki := pkitest.New(t, "127.0.0.1")
	return &componentstest.ClientConfiguration{CA: string(pki.CA), Cert: string(pki.ClientCert), Key: string(pki.ClientKey)}
}

// runWithBackupOn is runWithBackup on the engine m.
func runWithBackupOn(t *testing.T, m *componentstest.Engine, ns []talos.NodeSpec, e *talos.EtcdBackupSettings) *componentstest.Engine {
	t.Helper()
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var vm pulumi.ResourceState
		if err := ctx.RegisterComponentResource("test:index:Vm", "vm-cp-0", &vm); err != nil {
			return err
		}
		_, err := talos.NewClusterWithDeps(ctx, "lab", &talos.ClusterArgs{
			Cluster: talos.ClusterSettings{
				Name: "lab", TalosVersion: "v1.12.4", VIP: "10.0.0.5", EtcdBackup: e,
			},
			InstallerImage: pulumi.String("factory.talos.dev/metal-installer/abc:v1.12.4"),
			Nodes:          ns,
			Machines:       talos.Machines{DeletedWith: &vm},
		}, talos.Deps{Hooks: &componentstest.Hooks{}})
		return err
	}, pulumi.WithMocks("talos-cluster", "test", m))
	require.NoError(t, err)
	return m
}

func envOf(c componentstest.Registered) map[string]string {
	out := map[string]string{}
	containers := c.Inputs["spec"].ObjectValue()["jobTemplate"].ObjectValue()["spec"].ObjectValue()["template"].ObjectValue()["spec"].ObjectValue()["containers"].ArrayValue()
	for _, e := range containers[0].ObjectValue()["env"].ArrayValue() {
		out[e.ObjectValue()["name"].StringValue()] = e.ObjectValue()["value"].StringValue()
	}
	return out
}

// With cluster.etcdBackup, the cluster gets the schedule: the control
// planes (not the workers) let kube-system reach the Talos API as
// os:etcd:backup; the S3 credentials are a Secret whose key stays secret;
// the Talos service account comes after every control plane's apply (Talos
// defines its kind once the access is on); the CronJob of talos-backup
// comes after Cilium, the account and the credentials, with the store, the
// prefix and the one age key. Without it, none of these exist.
func TestEtcdBackupSchedule(t *testing.T) {
	t.Parallel()
	m := runWithBackup(t, nodes(3, 2), &talos.EtcdBackupSettings{
		Schedule: "0 */6 * * *", Bucket: "backups", Prefix: "/homelab/prod-snapshots/", Endpoint: "https://minio.lan:9000",
		Recipient: ageKey, AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: pulumi.String("s3cr3t-key"),
	})
	for _, a := range m.ByType(componentstest.Apply) {
		patches := a.Inputs["configPatches"].String()
		if strings.Contains(a.Name, "-cp-") {
			assert.Contains(t, patches, "kubernetesTalosAPIAccess", a.Name)
			assert.Contains(t, patches, "os:etcd:backup", a.Name)
		} else {
			assert.NotContains(t, patches, "kubernetesTalosAPIAccess", a.Name)
		}
	}
	secret := m.One(t, tSecret)
	data := secret.Inputs["stringData"]
	assert.True(t, data.ContainsSecrets(), "the secret key stays secret")
	assert.Equal(t, "kube-system", secret.Inputs["metadata"].ObjectValue()["namespace"].StringValue())

	account := m.One(t, tTalosAcct)
	assert.Equal(t, "talos-etcd-backup", account.Inputs["metadata"].ObjectValue()["name"].StringValue())
	assert.Equal(t, []resource.PropertyValue{resource.NewStringProperty("os:etcd:backup")}, account.Inputs["spec"].ObjectValue()["roles"].ArrayValue())
	for _, a := range m.ByType(componentstest.Apply) {
		if strings.Contains(a.Name, "-cp-") {
			assert.True(t, m.After(account, a), "the account after %s", a.Name)
		}
	}

	cron := m.One(t, tCronJob)
	cilium := m.ByType(componentstest.Release)[0]
	for _, before := range []componentstest.Registered{cilium, account, secret} {
		assert.True(t, m.After(cron, before), "the CronJob after %s", before.Name)
	}
	spec := cron.Inputs["spec"].ObjectValue()
	assert.Equal(t, "0 */6 * * *", spec["schedule"].StringValue())
	assert.Equal(t, "Forbid", spec["concurrencyPolicy"].StringValue())
	env := envOf(cron)
	assert.Regexp(t, `^homelab/prod-snapshots/[0-9a-f]{16}$`, env["S3_PREFIX"], "under the prefix, by the cluster instance")
	assert.Equal(t, map[string]string{
		"BUCKET": "backups", "S3_PREFIX": env["S3_PREFIX"], "AWS_REGION": "us-east-1", "CUSTOM_S3_ENDPOINT": "https://minio.lan:9000", "USE_PATH_STYLE": "true",
		"CLUSTER_NAME": "lab", "AGE_X25519_PUBLIC_KEY": ageKey, "ENABLE_COMPRESSION": "false", "DISABLE_ENCRYPTION": "false",
	}, env)
	assert.NotContains(t, fmt.Sprint(cron.Inputs), "s3cr3t-key", "the key only in the Secret")
	for _, r := range []componentstest.Registered{secret, account, cron} {
		assert.True(t, strings.HasSuffix(r.DeletedWith, "::vm-cp-0"), "%s goes with the machines: a whole-stack destroy calls no API for it", r.Name)
	}
	container := spec["jobTemplate"].ObjectValue()["spec"].ObjectValue()["template"].ObjectValue()["spec"].ObjectValue()["containers"].ArrayValue()[0].ObjectValue()
	assert.Equal(t, talos.DefaultEtcdBackupImage, container["image"].StringValue())

	// Without the schedule, nothing of it.
	m = runWithBackup(t, nodes(1, 1), nil)
	assert.Empty(t, m.ByType(tSecret))
	assert.Empty(t, m.ByType(tCronJob))
	assert.Empty(t, m.ByType(tTalosAcct))
	for _, a := range m.ByType(componentstest.Apply) {
		assert.NotContains(t, a.Inputs["configPatches"].String(), "kubernetesTalosAPIAccess")
	}

	m = runWithBackup(t, nodes(1, 0), &talos.EtcdBackupSettings{Schedule: "@daily", Bucket: "backups", Recipient: ageKey, AccessKeyID: "AKIA", SecretAccessKey: pulumi.String("x")})
	assert.Regexp(t, `^lab/[0-9a-f]{16}$`, envOf(m.One(t, tCronJob))["S3_PREFIX"], "the prefix defaults to the cluster's name")
}

// Each setting of the schedule is checked, by its path, before anything is
// registered.
func TestEtcdBackupSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		edit func(*talos.EtcdBackupSettings)
		path string
		want string
	}{
		{func(e *talos.EtcdBackupSettings) { e.Schedule = "every day" }, "schedule", "is not a cron schedule"},
		{func(e *talos.EtcdBackupSettings) { e.Schedule = "0 0 * * * *" }, "schedule", "is not a cron schedule"},
		{func(e *talos.EtcdBackupSettings) { e.Schedule = "TZ=Europe/Paris 0 3 * * *" }, "schedule", "time zone"},
		{func(e *talos.EtcdBackupSettings) { e.Schedule = "" }, "schedule", "required"},
		{func(e *talos.EtcdBackupSettings) { e.Bucket = "My_Bucket" }, "bucket", "is not an S3 bucket name"},
		{func(e *talos.EtcdBackupSettings) { e.Endpoint = "http://minio.lan:9000" }, "endpoint", "is not an https URL"},
		{func(e *talos.EtcdBackupSettings) { e.Recipient = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk you@laptop" }, "recipient", "age X25519"},
		{func(e *talos.EtcdBackupSettings) { e.SecretAccessKey = nil }, "accessKeyId", "are required"},
		{func(e *talos.EtcdBackupSettings) { e.AccessKeyID = "" }, "accessKeyId", "are required"},
		{func(e *talos.EtcdBackupSettings) { e.AccessKeyID, e.SecretAccessKey = "", nil }, "accessKeyId", "no cloud instance role"},
	} {
		e := talos.EtcdBackupSettings{Schedule: "0 3 * * *", Bucket: "backups", Recipient: ageKey, AccessKeyID: "AKIA", SecretAccessKey: pulumi.String("x")}
		tc.edit(&e)
		args := talos.ClusterArgs{
			Cluster:        talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4", EtcdBackup: &e},
			InstallerImage: pulumi.String("x"), Nodes: nodes(1, 0),
		}
		var p inputs.Problems
		args.Cluster.Check(&p, "cluster.")
		err := p.Err(talos.ComponentName, "lab")
		require.Error(t, err, tc.path)
		assert.Contains(t, err.Error(), "cluster.etcdBackup."+tc.path)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// talosBackupPathStyle is how talos-backup v0.1.0-beta.2 (the pinned
// image; beta.3 reads it the same) decides the bucket's addressing from its
// environment: pkg/config/service.go, UsePathStyle: os.Getenv(
// "USE_PATH_STYLE") == "false"; pkg/s3/s3.go applies it only when
// CUSTOM_S3_ENDPOINT is set. (The module proxy does not serve talos-backup,
// so this is its two lines, not an import of them.)
func talosBackupPathStyle(env map[string]string) bool {
	return env["CUSTOM_S3_ENDPOINT"] != "" && env["USE_PATH_STYLE"] == "false"
}

// The image gets the bucket addressing the settings ask for (issue 35, item
// B.6): the docs' MinIO target has use_path_style=true, and with no
// USE_PATH_STYLE the image addressed https://<bucket>.<endpoint>. AWS (no
// endpoint) gets no variable.
func TestEtcdBackupPathStyleAsTheImageReadsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		endpoint  string
		pathStyle bool
	}{{"https://minio.lan:9000", true}, {"https://minio.lan:9000", false}, {"", false}} {
		m := runWithBackup(t, nodes(1, 0), &talos.EtcdBackupSettings{
			Schedule: "@daily", Bucket: "backups", Endpoint: tc.endpoint, UsePathStyle: tc.pathStyle,
			Recipient: ageKey, AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: pulumi.String("k"),
		})
		env := envOf(m.One(t, tCronJob))
		assert.Equal(t, tc.pathStyle, talosBackupPathStyle(env), "endpoint %q, path style %v: %v", tc.endpoint, tc.pathStyle, env)
		if tc.endpoint == "" {
			assert.NotContains(t, env, "USE_PATH_STYLE")
		}
	}
}

// The in-cluster snapshots go under a directory of the cluster instance,
// named by its Talos CA as a backup's manifest records it (issue 35, item
// A.3): a stack destroyed and made again is a new instance (new CA, new
// secretbox key), and a restore pairs a snapshot only with a backup of its
// own instance. The CA as the provider gives it (base64 of PEM).
func TestEtcdBackupSnapshotsGoUnderTheClusterInstance(t *testing.T) {
	t.Parallel()
	pki := pkitest.New(t, "127.0.0.1")
	b64 := base64.StdEncoding.EncodeToString(pki.CA)
	settings := &talos.EtcdBackupSettings{Schedule: "@daily", Bucket: "backups", Recipient: ageKey, AccessKeyID: "AKIA", SecretAccessKey: pulumi.String("k")}
	m := runWithBackupOn(t, &componentstest.Engine{ClientConfiguration: &componentstest.ClientConfiguration{CA: b64, Cert: "crt", Key: "key"}}, nodes(1, 0), settings)
	fp, err := certs.Fingerprint(string(pki.CA))
	require.NoError(t, err)
	env := envOf(m.One(t, tCronJob))
	assert.Equal(t, "lab/"+certs.InstanceID(fp), env["S3_PREFIX"])

	other := runWithBackup(t, nodes(1, 0), settings)
	assert.NotEqual(t, env["S3_PREFIX"], envOf(other.One(t, tCronJob))["S3_PREFIX"], "another instance, another directory")
}

// A private CA (a home lab MinIO): the CronJob's pods get it as the AWS
// SDK's AWS_CA_BUNDLE file, from a ConfigMap (issue 35, item B.7); text
// that holds no certificate is refused by its path.
func TestEtcdBackupTrustsThePrivateCA(t *testing.T) {
	t.Parallel()
	pki := pkitest.New(t, "127.0.0.1")
	m := runWithBackup(t, nodes(1, 0), &talos.EtcdBackupSettings{
		Schedule: "@daily", Bucket: "backups", Endpoint: "https://minio.lan:9000", Recipient: ageKey,
		AccessKeyID: "AKIA", SecretAccessKey: pulumi.String("k"), CABundle: string(pki.CA),
	})
	cm := m.One(t, "kubernetes:core/v1:ConfigMap")
	assert.Equal(t, string(pki.CA), cm.Inputs["data"].ObjectValue()["ca.crt"].StringValue())
	cron := m.One(t, tCronJob)
	assert.True(t, m.After(cron, cm), "the CronJob after its CA")
	env := envOf(cron)
	assert.Equal(t, "/etc/talos-backup/ca/ca.crt", env["AWS_CA_BUNDLE"])
	pod := cron.Inputs["spec"].ObjectValue()["jobTemplate"].ObjectValue()["spec"].ObjectValue()["template"].ObjectValue()["spec"].ObjectValue()
	assert.Contains(t, fmt.Sprint(pod["volumes"]), "talos-etcd-backup-ca")
	assert.Contains(t, fmt.Sprint(pod["containers"]), "/etc/talos-backup/ca")

	none := runWithBackup(t, nodes(1, 0), &talos.EtcdBackupSettings{
		Schedule: "@daily", Bucket: "backups", Recipient: ageKey, AccessKeyID: "AKIA", SecretAccessKey: pulumi.String("k"), Region: "eu-west-1",
	})
	assert.Empty(t, none.ByType("kubernetes:core/v1:ConfigMap"))
	assert.NotContains(t, envOf(none.One(t, tCronJob)), "AWS_CA_BUNDLE")

	e := talos.EtcdBackupSettings{Schedule: "@daily", Bucket: "backups", Recipient: ageKey, AccessKeyID: "AKIA", SecretAccessKey: pulumi.String("k"), CABundle: "not a certificate"}
	var p inputs.Problems
	(&talos.ClusterSettings{Name: "lab", TalosVersion: "v1.12.4", EtcdBackup: &e}).Check(&p, "cluster.")
	require.ErrorContains(t, p.Err(talos.ComponentName, "lab"), "cluster.etcdBackup.caBundle: holds no PEM certificate")
}
