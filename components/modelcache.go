package components

import (
	"fmt"
	"strings"
	"time"

	batchv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/batch/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/config"
)

// ModelCacheArgs describes the model cache claim and the Job that fills it.
type ModelCacheArgs struct {
	Namespace pulumi.StringInput
	// HFTokenSecret is the Secret the download reads HF_TOKEN from.
	HFTokenSecret pulumi.StringInput
	Cache         config.ModelCacheConfig
	Download      config.ModelDownloadConfig
	Model         config.ModelConfig
	PullSecrets   []string
}

// ModelCache is the PVC holding the model and draft checkpoints, and the download Job.
type ModelCache struct {
	pulumi.ResourceState
	ClaimName pulumi.StringOutput `pulumi:"claimName"`
	// Ready lists what must finish before the cache can serve: the download Job (none when the
	// download is off). The graph depends on it.
	Ready []pulumi.Resource `pulumi:"-"`
}

// NewModelCache creates (or adopts) the cache claim and runs the download Job to completion.
//
// The claim is never replaced or deleted by a config change: its immutable fields are ignored after
// creation, and destroy keeps it unless DeleteOnDestroy is set.
func NewModelCache(ctx *pulumi.Context, name string, args *ModelCacheArgs, opts ...pulumi.ResourceOption) (*ModelCache, error) {
	mc := &ModelCache{}
	if err := ctx.RegisterComponentResource("minimax-m3:index:ModelCache", name, mc, opts...); err != nil {
		return nil, err
	}
	mc.ClaimName = pulumi.String(args.Cache.ClaimName).ToStringOutput()

	var deps []pulumi.Resource
	if args.Cache.Create {
		pvc, err := corev1.NewPersistentVolumeClaim(ctx, name, &corev1.PersistentVolumeClaimArgs{
			Metadata: &metav1.ObjectMetaArgs{
				Name:      pulumi.String(args.Cache.ClaimName),
				Namespace: args.Namespace,
				Labels:    managedLabels(),
				Annotations: pulumi.StringMap{
					// The provider would otherwise wait a fixed five minutes for an unbound claim (and
					// forever with WaitForFirstConsumer before a pod). The download Job is the real
					// readiness signal: it mounts the claim and reports why it cannot.
					"pulumi.com/skipAwait": pulumi.String("true"),
				},
			},
			Spec: &corev1.PersistentVolumeClaimSpecArgs{
				AccessModes:      pulumi.StringArray{pulumi.String(args.Cache.AccessMode)},
				StorageClassName: optionalString(args.Cache.StorageClass),
				Resources: &corev1.VolumeResourceRequirementsArgs{
					Requests: pulumi.StringMap{"storage": pulumi.String(args.Cache.Size)},
				},
			},
		},
			pulumi.Parent(mc),
			pulumi.RetainOnDelete(!args.Cache.DeleteOnDestroy),
			// Changing these would replace the claim and lose hours of download.
			pulumi.IgnoreChanges([]string{"spec.storageClassName", "spec.accessModes", "spec.volumeName", "spec.volumeMode", "spec.selector"}),
		)
		if err != nil {
			return nil, err
		}
		mc.ClaimName = pvc.Metadata.Name().Elem()
		deps = append(deps, pvc)
	}

	if args.Download.Enabled {
		job, err := newDownloadJob(ctx, name, args, mc, deps)
		if err != nil {
			return nil, err
		}
		mc.Ready = []pulumi.Resource{job}
	}
	return mc, ctx.RegisterResourceOutputs(mc, pulumi.Map{"claimName": mc.ClaimName})
}

// DownloadScript is the shell script the download Job runs.
func DownloadScript(d config.ModelDownloadConfig, m config.ModelConfig) string {
	return strings.Join([]string{
		"set -eux",
		"pip install --no-cache-dir huggingface_hub==" + d.HubClientVersion,
		fmt.Sprintf("hf download %s \\\n  --revision %s", m.Name, m.Revision),
		fmt.Sprintf("hf download %s \\\n  --revision %s", m.Draft.Name, m.Draft.Revision),
	}, "\n") + "\n"
}

func newDownloadJob(ctx *pulumi.Context, name string, args *ModelCacheArgs, parent *ModelCache, deps []pulumi.Resource) (*batchv1.Job, error) {
	d := args.Download
	timeout, _ := time.ParseDuration(d.Timeout) // validated
	labels := pulumi.StringMap{"app": pulumi.String(d.JobName)}

	var pullSecrets corev1.LocalObjectReferenceArray
	for _, s := range args.PullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReferenceArgs{Name: pulumi.String(s)})
	}
	var tolerations corev1.TolerationArray
	for _, t := range d.Scheduling.Tolerations {
		tolerations = append(tolerations, corev1.TolerationArgs{
			Key: optionalString(t.Key), Operator: optionalString(t.Operator), Value: optionalString(t.Value), Effect: optionalString(t.Effect),
		})
	}
	var res *corev1.ResourceRequirementsArgs
	if len(d.Resources.Requests)+len(d.Resources.Limits) > 0 {
		res = &corev1.ResourceRequirementsArgs{Requests: pulumi.ToStringMap(d.Resources.Requests), Limits: pulumi.ToStringMap(d.Resources.Limits)}
	}

	var annotations pulumi.StringMap
	if !d.WaitForCompletion {
		annotations = pulumi.StringMap{"pulumi.com/skipAwait": pulumi.String("true")}
	}
	return batchv1.NewJob(ctx, name+"-download", &batchv1.JobArgs{
		Metadata: &metav1.ObjectMetaArgs{
			Name:        pulumi.String(d.JobName),
			Namespace:   args.Namespace,
			Labels:      managedLabels(),
			Annotations: annotations,
		},
		Spec: &batchv1.JobSpecArgs{
			BackoffLimit: pulumi.Int(d.BackoffLimit),
			Completions:  pulumi.Int(1),
			Parallelism:  pulumi.Int(1),
			// Kubernetes ends a stuck download itself (reason DeadlineExceeded), which the provider
			// reports at once, instead of the provider's timer restarting on every pod event.
			ActiveDeadlineSeconds: pulumi.Int(int(timeout.Seconds())),
			Template: &corev1.PodTemplateSpecArgs{
				Metadata: &metav1.ObjectMetaArgs{Labels: labels},
				Spec: &corev1.PodSpecArgs{
					RestartPolicy:     pulumi.String("Never"),
					ImagePullSecrets:  pullSecrets,
					NodeSelector:      pulumi.ToStringMap(d.Scheduling.NodeSelector),
					Tolerations:       tolerations,
					SchedulerName:     optionalString(d.Scheduling.SchedulerName),
					RuntimeClassName:  optionalString(d.Scheduling.RuntimeClassName),
					PriorityClassName: optionalString(d.Scheduling.PriorityClassName),
					Containers: corev1.ContainerArray{corev1.ContainerArgs{
						Name:            pulumi.String("model-download"),
						Image:           pulumi.String(d.Image),
						ImagePullPolicy: pulumi.String("IfNotPresent"),
						SecurityContext: &corev1.SecurityContextArgs{
							AllowPrivilegeEscalation: pulumi.Bool(false),
							Capabilities:             &corev1.CapabilitiesArgs{Drop: pulumi.StringArray{pulumi.String("ALL")}},
							SeccompProfile:           &corev1.SeccompProfileArgs{Type: pulumi.String("RuntimeDefault")},
						},
						Command: pulumi.StringArray{pulumi.String("sh"), pulumi.String("-c")},
						EnvFrom: corev1.EnvFromSourceArray{corev1.EnvFromSourceArgs{
							SecretRef: &corev1.SecretEnvSourceArgs{Name: args.HFTokenSecret},
						}},
						Env: corev1.EnvVarArray{
							corev1.EnvVarArgs{Name: pulumi.String("HF_HOME"), Value: pulumi.String(args.Cache.MountPath)},
							corev1.EnvVarArgs{Name: pulumi.String("HF_XET_HIGH_PERFORMANCE"), Value: pulumi.String("1")},
						},
						Args:      pulumi.StringArray{pulumi.String(DownloadScript(d, args.Model))},
						Resources: res,
						VolumeMounts: corev1.VolumeMountArray{corev1.VolumeMountArgs{
							Name: pulumi.String(cacheVolumeName), MountPath: pulumi.String(args.Cache.MountPath),
						}},
					}},
					Volumes: corev1.VolumeArray{corev1.VolumeArgs{
						Name: pulumi.String(cacheVolumeName),
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSourceArgs{
							ClaimName: parent.ClaimName,
						},
					}},
				},
			},
		},
	},
		pulumi.Parent(parent),
		pulumi.DependsOn(deps),
		// The Job keeps its name, so a new revision deletes the old Job before creating the new one.
		pulumi.DeleteBeforeReplace(true),
		// Leave Kubernetes' activeDeadlineSeconds the first word on a slow download.
		pulumi.Timeouts(&pulumi.CustomTimeouts{Create: (timeout + 10*time.Minute).String(), Update: (timeout + 10*time.Minute).String()}),
	)
}

func optionalString(s string) pulumi.StringPtrInput {
	if s == "" {
		return nil
	}
	return pulumi.String(s)
}
