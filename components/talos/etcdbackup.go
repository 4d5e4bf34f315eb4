package talos

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	"github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apiextensions"
	batchv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/batch/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/robfig/cron/v3"

	"github.com/fluodata/talos-pulumi/components/inputs"
	"github.com/fluodata/talos-pulumi/internal/agekeys"
	"github.com/fluodata/talos-pulumi/internal/certs"
)

// The in-cluster etcd snapshots run Sidero's talos-backup (v0.1.0-beta.2,
// github.com/siderolabs/talos-backup): it takes the snapshot through the
// Talos API with a Talos service account of role os:etcd:backup, encrypts it
// with age to one X25519 key and puts it to S3 as
// <prefix>/<cluster>-<RFC 3339 time>.snap.age. It fits an s3:// target and
// one age key, and nothing else: no file target (the cluster cannot write
// to the operator's disk), no SSH recipients and no second recipient (it
// takes one AGE_X25519_PUBLIC_KEY), no retention.
const (
	DefaultEtcdBackupImage = "ghcr.io/siderolabs/talos-backup:v0.1.0-beta.2"
	// EtcdBackupNamespace holds the CronJob, its Talos service account and
	// its S3 credentials; the control planes let it reach the Talos API.
	EtcdBackupNamespace = "kube-system"
	// EtcdBackupName names the Kubernetes objects: the CronJob, the Talos
	// service account, and the Secret Talos writes its talosconfig to.
	EtcdBackupName = "talos-etcd-backup"
	// EtcdBackupRole is the only Talos role the service account has.
	EtcdBackupRole = "os:etcd:backup"
	// DefaultEtcdBackupRegion is the S3 region when none is given.
	DefaultEtcdBackupRegion = "us-east-1"
)

// Name suffixes of the schedule's resources.
const (
	EtcdBackupSuffix        = "-etcd-backup"
	EtcdBackupAccountSuffix = "-etcd-backup-account"
	EtcdBackupS3Suffix      = "-etcd-backup-s3"
	EtcdBackupCASuffix      = "-etcd-backup-ca"
)

// EtcdBackupSettings schedule etcd snapshots taken inside the cluster, as
// a CronJob, to an S3-compatible store.
type EtcdBackupSettings struct {
	// Schedule is when a snapshot is taken: a cron expression as a
	// Kubernetes CronJob takes it (UTC), e.g. "0 */6 * * *" or "@daily".
	Schedule string `pulumi:"schedule"`
	// Bucket is the S3 bucket.
	Bucket string `pulumi:"bucket"`
	// Prefix is the key prefix the snapshots go under (default: the
	// cluster's name).
	Prefix string `pulumi:"prefix,optional"`
	// Endpoint is an S3-compatible store's https URL; AWS when empty.
	Endpoint string `pulumi:"endpoint,optional"`
	// Region is the store's region (default us-east-1).
	Region string `pulumi:"region,optional"`
	// UsePathStyle addresses the bucket as <endpoint>/<bucket> instead of
	// <bucket>.<endpoint> (MinIO and most self-hosted stores need it); only
	// with an endpoint.
	UsePathStyle bool `pulumi:"usePathStyle,optional"`
	// Recipient is the age X25519 public key (age1...) every snapshot is
	// encrypted to.
	Recipient string `pulumi:"recipient"`
	// AccessKeyID is the store's access key id, with SecretAccessKey: the
	// nodes have no instance role to fall back on.
	AccessKeyID string `pulumi:"accessKeyId,optional"`
	// SecretAccessKey is the store's secret key.
	SecretAccessKey pulumi.StringInput `pulumi:"secretAccessKey,optional" provider:"secret"`
	// Image is the talos-backup image (default DefaultEtcdBackupImage).
	Image string `pulumi:"image,optional"`
	// CABundle is PEM of the CA that signed the endpoint's certificate (a
	// private CA): the snapshots' uploads check the endpoint against it
	// alone; none: the image's own roots.
	CABundle string `pulumi:"caBundle,optional"`
}

// etcdBackupCADir is where the CronJob's pods find CABundle, as ca.crt.
const etcdBackupCADir = "/etc/talos-backup/ca"

// bucketRe is S3's bucket naming rule.
var bucketRe = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// cronParser reads a schedule as Kubernetes does (robfig/cron, standard
// five fields and descriptors).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseEtcdBackupSchedule reads a schedule as the CronJob's controller
// does: what the tools compare the snapshots' times with.
func ParseEtcdBackupSchedule(schedule string) (cron.Schedule, error) {
	return cronParser.Parse(schedule)
}

// check records the settings' problems under prefix (e.g.
// "cluster.etcdBackup.").
func (e *EtcdBackupSettings) check(p *inputs.Problems, prefix string) {
	at := func(path string) string { return prefix + path }
	if p.Required(at("schedule"), e.Schedule) {
		if strings.Contains(e.Schedule, "TZ") {
			p.Add(at("schedule"), "%q: a time zone is not part of a CronJob's schedule (it runs in UTC)", e.Schedule)
		} else if _, err := cronParser.Parse(e.Schedule); err != nil {
			p.Add(at("schedule"), "%q is not a cron schedule like \"0 */6 * * *\" or \"@daily\": %v", e.Schedule, err)
		}
	}
	if p.Required(at("bucket"), e.Bucket) && !bucketRe.MatchString(e.Bucket) {
		p.Add(at("bucket"), "%q is not an S3 bucket name (3-63 lowercase letters, digits, '.' and '-')", e.Bucket)
	}
	if e.Endpoint != "" {
		if u, err := url.Parse(e.Endpoint); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			p.Add(at("endpoint"), "%q is not an https URL like https://minio.lan:9000: the snapshots go over the network in it", e.Endpoint)
		}
	}
	if p.Required(at("recipient"), e.Recipient) {
		if !agekeys.IsX25519(e.Recipient) {
			p.Add(at("recipient"), "is not an age X25519 public key (age1...): talos-backup encrypts to one such key")
		}
	}
	// Neither Proxmox VMs nor rented servers have a cloud instance role
	// that the AWS SDK of the image could fall back on: without both keys
	// every Job would fail, unseen, at its first request.
	if e.AccessKeyID == "" || e.SecretAccessKey == nil {
		p.Add(at("accessKeyId"), "and secretAccessKey are required: the cluster's nodes have no cloud instance role to sign the snapshots' uploads with")
	}
	if e.CABundle != "" && !certs.HasCertificate(e.CABundle) {
		p.Add(at("caBundle"), "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
	}
	if strings.ContainsAny(e.Prefix, " \t\n") || strings.Contains(e.Prefix, "//") {
		p.Add(at("prefix"), "%q is not a key prefix like backups/homelab", e.Prefix)
	}
}

// withDefaults fills the optional settings.
func (e EtcdBackupSettings) withDefaults(cluster string) EtcdBackupSettings {
	if e.Prefix == "" {
		e.Prefix = cluster
	}
	e.Prefix = strings.Trim(e.Prefix, "/")
	if e.Region == "" {
		e.Region = DefaultEtcdBackupRegion
	}
	if e.Image == "" {
		e.Image = DefaultEtcdBackupImage
	}
	return e
}

// APIAccessPatch lets pods of EtcdBackupNamespace reach the Talos API
// with the etcd backup role: a control-plane-only feature.
func APIAccessPatch() string {
	return render(patchDoc{Machine: &machinePatch{Features: &featuresPatch{
		KubernetesTalosAPIAccess: &talosAPIAccessPatch{
			Enabled: true, AllowedRoles: []string{EtcdBackupRole}, AllowedKubernetesNamespaces: []string{EtcdBackupNamespace},
		},
	}}})
}

// usePathStyleEnv is the USE_PATH_STYLE value that gives the image the
// addressing e asks for, as talos-backup v0.1.0-beta.2 (and beta.3) reads
// it: pkg/config/service.go sets UsePathStyle to os.Getenv("USE_PATH_STYLE")
// == "false", inverted, and pkg/s3/s3.go applies it only with a
// CUSTOM_S3_ENDPOINT. Unset, path-style was off, and a MinIO target got
// https://<bucket>.<endpoint>. Set both ways, so that the addressing never
// rests on the image's default; empty (unset) without an endpoint. An
// image that reads the variable the right way round needs the opposite:
// docs/backup.md says so beside `image`.
func usePathStyleEnv(e EtcdBackupSettings) string {
	switch {
	case e.Endpoint == "":
		return ""
	case e.UsePathStyle:
		return "false"
	default:
		return "true"
	}
}

// etcdBackup registers the schedule: the S3 credentials as a Secret, the
// Talos service account (a custom resource Talos defines once the control
// planes allow the access, so it comes after their applies) and the
// CronJob.
func (b *build) etcdBackup(k8s *kubernetes.Provider, after []pulumi.Resource) error {
	ctx, name, args := b.ctx, b.name, b.args
	e := args.Cluster.EtcdBackup.withDefaults(args.Cluster.Name)
	opts := func(deps ...pulumi.Resource) []pulumi.ResourceOption {
		return b.clusterOpts(pulumi.Provider(k8s), pulumi.DependsOn(append(append([]pulumi.Resource{}, after...), deps...)))
	}
	meta := func(n string) *metav1.ObjectMetaArgs {
		return &metav1.ObjectMetaArgs{Name: pulumi.String(n), Namespace: pulumi.String(EtcdBackupNamespace)}
	}
	var deps []pulumi.Resource
	var envFrom corev1.EnvFromSourceArray
	if e.SecretAccessKey != nil {
		secret, err := corev1.NewSecret(ctx, name+EtcdBackupS3Suffix, &corev1.SecretArgs{
			Metadata: meta(EtcdBackupName + "-s3"),
			StringData: pulumi.StringMap{
				"AWS_ACCESS_KEY_ID":     pulumi.String(e.AccessKeyID),
				"AWS_SECRET_ACCESS_KEY": pulumi.ToSecret(e.SecretAccessKey).(pulumi.StringOutput),
			},
		}, opts()...)
		if err != nil {
			return fmt.Errorf("unable to create the etcd backup's S3 credentials: %w", err)
		}
		deps = append(deps, secret)
		envFrom = corev1.EnvFromSourceArray{corev1.EnvFromSourceArgs{
			SecretRef: &corev1.SecretEnvSourceArgs{Name: pulumi.String(EtcdBackupName + "-s3")},
		}}
	}
	account, err := apiextensions.NewCustomResource(ctx, name+EtcdBackupAccountSuffix, &apiextensions.CustomResourceArgs{
		ApiVersion: pulumi.String("talos.dev/v1alpha1"),
		Kind:       pulumi.String("ServiceAccount"),
		Metadata:   meta(EtcdBackupName),
		OtherFields: map[string]any{
			"spec": map[string]any{"roles": []string{EtcdBackupRole}},
		},
	}, opts()...)
	if err != nil {
		return fmt.Errorf("unable to create the etcd backup's Talos service account: %w", err)
	}
	deps = append(deps, account)

	// The snapshots of this cluster instance go under <prefix>/<instance>,
	// the instance named by its Talos CA (certs.InstanceID): a stack
	// destroyed and made again under the same name is another instance,
	// with another CA and secretbox key, and a restore pairs a snapshot
	// only with a backup of its own instance (the manifest's talosCA).
	// The CA is public: the name is no secret.
	prefix := pulumi.Unsecret(b.secrets.ClientConfiguration.CaCertificate().ApplyT(func(ca string) (string, error) {
		fp, err := certs.Fingerprint(ca)
		if err != nil {
			return "", fmt.Errorf("unable to name the cluster instance of the etcd snapshots: %w", err)
		}
		return e.Prefix + "/" + certs.InstanceID(fp), nil
	})).(pulumi.StringOutput)
	env := corev1.EnvVarArray{corev1.EnvVarArgs{Name: pulumi.String("S3_PREFIX"), Value: prefix}}
	mounts := corev1.VolumeMountArray{
		corev1.VolumeMountArgs{Name: pulumi.String("tmp"), MountPath: pulumi.String("/tmp")},
		corev1.VolumeMountArgs{Name: pulumi.String("talos"), MountPath: pulumi.String("/var/run/secrets/talos.dev"), ReadOnly: pulumi.Bool(true)},
	}
	volumes := corev1.VolumeArray{
		corev1.VolumeArgs{Name: pulumi.String("tmp"), EmptyDir: &corev1.EmptyDirVolumeSourceArgs{}},
		corev1.VolumeArgs{Name: pulumi.String("talos"), Secret: &corev1.SecretVolumeSourceArgs{SecretName: pulumi.String(EtcdBackupName)}},
	}
	if e.CABundle != "" {
		// The AWS SDK of the image (talos-backup's config.LoadDefaultConfig)
		// reads AWS_CA_BUNDLE, a PEM file (aws-sdk-go-v2 config, env
		// AWS_CA_BUNDLE, CustomCABundle).
		ca, err := corev1.NewConfigMap(ctx, name+EtcdBackupCASuffix, &corev1.ConfigMapArgs{
			Metadata: meta(EtcdBackupName + "-ca"),
			Data:     pulumi.StringMap{"ca.crt": pulumi.String(e.CABundle)},
		}, opts()...)
		if err != nil {
			return fmt.Errorf("unable to create the etcd backup's CA bundle: %w", err)
		}
		deps = append(deps, ca)
		env = append(env, corev1.EnvVarArgs{Name: pulumi.String("AWS_CA_BUNDLE"), Value: pulumi.String(etcdBackupCADir + "/ca.crt")})
		mounts = append(mounts, corev1.VolumeMountArgs{Name: pulumi.String("ca"), MountPath: pulumi.String(etcdBackupCADir), ReadOnly: pulumi.Bool(true)})
		volumes = append(volumes, corev1.VolumeArgs{Name: pulumi.String("ca"), ConfigMap: &corev1.ConfigMapVolumeSourceArgs{Name: pulumi.String(EtcdBackupName + "-ca")}})
	}
	for _, kv := range [][2]string{
		{"BUCKET", e.Bucket}, {"AWS_REGION", e.Region}, {"CUSTOM_S3_ENDPOINT", e.Endpoint},
		{"USE_PATH_STYLE", usePathStyleEnv(e)},
		{"CLUSTER_NAME", args.Cluster.Name}, {"AGE_X25519_PUBLIC_KEY", e.Recipient},
		{"ENABLE_COMPRESSION", "false"}, {"DISABLE_ENCRYPTION", "false"},
	} {
		if kv[1] != "" {
			env = append(env, corev1.EnvVarArgs{Name: pulumi.String(kv[0]), Value: pulumi.String(kv[1])})
		}
	}
	_, err = batchv1.NewCronJob(ctx, name+EtcdBackupSuffix, &batchv1.CronJobArgs{
		Metadata: meta(EtcdBackupName),
		Spec: &batchv1.CronJobSpecArgs{
			Schedule:                   pulumi.String(e.Schedule),
			ConcurrencyPolicy:          pulumi.String("Forbid"),
			SuccessfulJobsHistoryLimit: pulumi.Int(3),
			FailedJobsHistoryLimit:     pulumi.Int(3),
			JobTemplate: &batchv1.JobTemplateSpecArgs{Spec: &batchv1.JobSpecArgs{
				BackoffLimit: pulumi.Int(2),
				Template: &corev1.PodTemplateSpecArgs{Spec: &corev1.PodSpecArgs{
					RestartPolicy: pulumi.String("OnFailure"),
					// A cluster of control planes only has no other node.
					Tolerations: corev1.TolerationArray{corev1.TolerationArgs{
						Key: pulumi.String("node-role.kubernetes.io/control-plane"), Operator: pulumi.String("Exists"), Effect: pulumi.String("NoSchedule"),
					}},
					Containers: corev1.ContainerArray{corev1.ContainerArgs{
						Name: pulumi.String("talos-backup"), Image: pulumi.String(e.Image),
						Command: pulumi.StringArray{pulumi.String("/talos-backup")}, WorkingDir: pulumi.String("/tmp"),
						Env: env, EnvFrom: envFrom,
						SecurityContext: &corev1.SecurityContextArgs{
							RunAsUser: pulumi.Int(1000), RunAsGroup: pulumi.Int(1000), RunAsNonRoot: pulumi.Bool(true),
							AllowPrivilegeEscalation: pulumi.Bool(false), ReadOnlyRootFilesystem: pulumi.Bool(true),
							Capabilities:   &corev1.CapabilitiesArgs{Drop: pulumi.StringArray{pulumi.String("ALL")}},
							SeccompProfile: &corev1.SeccompProfileArgs{Type: pulumi.String("RuntimeDefault")},
						},
						VolumeMounts: mounts,
					}},
					Volumes: volumes,
				}},
			}},
		},
	}, opts(deps...)...)
	if err != nil {
		return fmt.Errorf("unable to create the etcd backup's CronJob: %w", err)
	}
	return nil
}
