package components

import (
	"fmt"
	"strings"
	"time"

	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	batchv1 "k8s.io/api/batch/v1"
	k8scorev1 "k8s.io/api/core/v1"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// ModelCacheArgs describes the model cache claim and the Job that fills it.
type ModelCacheArgs struct {
	// Meta carries the stack's identity and what it adopted into every object's annotations.
	Meta      StackMeta
	Namespace pulumi.StringInput
	// HFTokenSecret is the Secret the download reads HF_TOKEN from; Requires what must exist
	// before the download starts (the stack's token Secret).
	HFTokenSecret string
	Requires      []pulumi.Resource
	Cache         config.ModelCacheConfig
	Download      config.ModelDownloadConfig
	Model         config.ModelConfig
	PullSecrets   []string
	// LegacyName is the component's logical name under the first naming scheme.
	LegacyName string
}

// ModelCache is the PVC holding the model and draft checkpoints, and the download Job.
type ModelCache struct {
	pulumi.ResourceState
	ClaimName pulumi.StringOutput `pulumi:"claimName"`
	// Ready lists what must finish before the cache can serve: the download Job (none when the
	// download is off). The graph depends on it.
	Ready []pulumi.Resource `pulumi:"-"`
}

// NewModelCache creates (or uses) the cache claim and runs the download Job to completion.
//
// The claim is never replaced or deleted by a config change: its immutable fields are ignored after
// creation, and destroy keeps it unless DeleteOnDestroy is set.
func NewModelCache(ctx *pulumi.Context, name string, args *ModelCacheArgs, opts ...pulumi.ResourceOption) (*ModelCache, error) {
	mc := &ModelCache{}
	opts = append(opts, legacyAlias(ctx, args.LegacyName, deploymentType, modelCacheType))
	if err := ctx.RegisterComponentResource(modelCacheType, name, mc, opts...); err != nil {
		return nil, err
	}
	mc.ClaimName = pulumi.String(args.Cache.ClaimName).ToStringOutput()

	deps := append([]pulumi.Resource{}, args.Requires...)
	if args.Cache.Create {
		pvc, err := corev1.NewPersistentVolumeClaim(ctx, name, &corev1.PersistentVolumeClaimArgs{
			Metadata: &metav1.ObjectMetaArgs{
				Name:      pulumi.String(args.Cache.ClaimName),
				Namespace: args.Namespace,
				Labels:    stackLabels(ctx),
				Annotations: args.Meta.annotations(ctx, "PersistentVolumeClaim", args.Cache.ClaimName, pulumi.StringMap{
					// The provider would otherwise wait a fixed five minutes for an unbound claim (and
					// forever with WaitForFirstConsumer before a pod). The download Job is the real
					// readiness signal: it mounts the claim and reports why it cannot.
					"pulumi.com/skipAwait": pulumi.String("true"),
				}),
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
			// An adopted claim was the user's before the stack: destroy leaves it.
			pulumi.RetainOnDelete(!args.Cache.DeleteOnDestroy || args.Meta.Adopted("PersistentVolumeClaim", args.Cache.ClaimName)),
			// Changing these would replace the claim and lose hours of download.
			pulumi.IgnoreChanges([]string{"spec.storageClassName", "spec.accessModes", "spec.volumeName", "spec.volumeMode", "spec.selector"}),
			legacyAlias(ctx, args.LegacyName, deploymentType, modelCacheType, "kubernetes:core/v1:PersistentVolumeClaim"),
		)
		if err != nil {
			return nil, err
		}
		mc.ClaimName = pvc.Metadata.Name().Elem()
		deps = append(deps, pvc)
	}

	if args.Download.Enabled {
		job, err := newDownloadJob(ctx, args, mc, deps)
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

// DownloadDeadlines are the download's deadlines: modelDownload.timeout for each attempt (the pod's
// activeDeadlineSeconds), and for the Job, every attempt (backoffLimit retries) with the Job
// controller's back-off between them (10 s doubling, at most 6 min) and a minute per attempt to
// schedule and start the pod.
func DownloadDeadlines(d config.ModelDownloadConfig) (attempt, whole time.Duration) {
	attempt, _ = time.ParseDuration(d.Timeout) // validated
	attempts := d.BackoffLimit + 1
	whole = time.Duration(attempts) * (attempt + time.Minute)
	backoff := 10 * time.Second
	for range d.BackoffLimit {
		whole += backoff
		backoff = min(2*backoff, 6*time.Minute)
	}
	return attempt, whole
}

// DownloadJobSpec is the download Job's spec. The token Secret's name is filled in by the caller.
func DownloadJobSpec(d config.ModelDownloadConfig, cache config.ModelCacheConfig, m config.ModelConfig, pullSecrets []string, tokenSecret string) batchv1.JobSpec {
	attempt, whole := DownloadDeadlines(d)
	attemptSeconds, wholeSeconds := int64(attempt.Seconds()), int64(whole.Seconds())
	one := int32(1)
	backoff := int32(d.BackoffLimit)
	noEscalation := false

	pod := manifest.SitePodSpec(pullSecrets, d.Scheduling)
	pod.RestartPolicy = k8scorev1.RestartPolicyNever
	// modelDownload.timeout bounds one attempt: a retry gets the whole of it again.
	pod.ActiveDeadlineSeconds = &attemptSeconds
	pod.Containers = []k8scorev1.Container{{
		Name:            "model-download",
		Image:           d.Image,
		ImagePullPolicy: k8scorev1.PullIfNotPresent,
		SecurityContext: &k8scorev1.SecurityContext{
			AllowPrivilegeEscalation: &noEscalation,
			Capabilities:             &k8scorev1.Capabilities{Drop: []k8scorev1.Capability{"ALL"}},
			SeccompProfile:           &k8scorev1.SeccompProfile{Type: k8scorev1.SeccompProfileTypeRuntimeDefault},
		},
		Command: []string{"sh", "-c"},
		Args:    []string{DownloadScript(d, m)},
		EnvFrom: []k8scorev1.EnvFromSource{{SecretRef: &k8scorev1.SecretEnvSource{LocalObjectReference: k8scorev1.LocalObjectReference{Name: tokenSecret}}}},
		Env: []k8scorev1.EnvVar{
			{Name: "HF_HOME", Value: cache.MountPath},
			{Name: "HF_XET_HIGH_PERFORMANCE", Value: "1"},
		},
		Resources:    manifest.Resources(d.Resources, nil),
		VolumeMounts: []k8scorev1.VolumeMount{{Name: manifest.CacheVolumeName, MountPath: cache.MountPath}},
	}}
	pod.Volumes = []k8scorev1.Volume{{
		Name:         manifest.CacheVolumeName,
		VolumeSource: k8scorev1.VolumeSource{PersistentVolumeClaim: &k8scorev1.PersistentVolumeClaimVolumeSource{ClaimName: cache.ClaimName}},
	}}
	return batchv1.JobSpec{
		BackoffLimit: &backoff,
		Completions:  &one,
		Parallelism:  &one,
		// Kubernetes ends a stuck download itself (reason DeadlineExceeded), which the provider
		// reports at once, instead of the provider's timer restarting on every pod event. The
		// Job's deadline covers every attempt and the back-off between them.
		ActiveDeadlineSeconds: &wholeSeconds,
		Template: k8scorev1.PodTemplateSpec{
			ObjectMeta: k8smetav1.ObjectMeta{Labels: map[string]string{"app": d.JobName}},
			Spec:       pod,
		},
	}
}

func newDownloadJob(ctx *pulumi.Context, args *ModelCacheArgs, parent *ModelCache, deps []pulumi.Resource) (pulumi.Resource, error) {
	d := args.Download
	_, whole := DownloadDeadlines(d)
	var annotations pulumi.StringMap
	if !d.WaitForCompletion {
		// skipAwait also skips waiting for a Job's deletion (the provider keeps that legacy
		// behaviour for Jobs), so a replaced Job would still exist, terminating, when its successor
		// of the same name is applied. Deleted in the background, the Job object is gone when the
		// delete returns (it has no finalizer of its own); the garbage collector then removes its
		// pods.
		annotations = pulumi.StringMap{
			"pulumi.com/skipAwait":                 pulumi.String("true"),
			"pulumi.com/deletionPropagationPolicy": pulumi.String("background"),
		}
	}
	return newObject(ctx, "model-download", objectArgs{
		APIVersion: "batch/v1", Kind: "Job",
		Name: d.JobName, Namespace: args.Namespace, Labels: stackLabels(ctx), Annotations: args.Meta.annotations(ctx, "Job", d.JobName, annotations),
		Spec: DownloadJobSpec(d, args.Cache, args.Model, args.PullSecrets, args.HFTokenSecret),
	},
		pulumi.Parent(parent),
		pulumi.DependsOn(deps),
		// The Job keeps its name, so a new revision deletes the old Job before creating the new one.
		pulumi.DeleteBeforeReplace(true),
		// Leave Kubernetes' activeDeadlineSeconds the first word on a slow download.
		pulumi.Timeouts(&pulumi.CustomTimeouts{Create: (whole + 10*time.Minute).String(), Update: (whole + 10*time.Minute).String()}),
		legacyAlias(ctx, legacySuffixed(args.LegacyName, "-download"), deploymentType, modelCacheType, "kubernetes:batch/v1:Job"),
	)
}
