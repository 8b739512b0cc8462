package rackbox_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/benchmark"
	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// The box itself, with plain Kubernetes objects: what a GB200 rack does with GPU pods, channel
// claims, a claim for the RWX class and Jobs, all through the real controllers and scheduler.
func TestBox(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	crds := os.Getenv("MINIMAX_M3_CRDS")
	if crds == "" {
		crds = filepath.Join(root, "..", "shared", "reference", "crds")
	}
	ctx := context.Background()
	b, err := rackbox.Start(ctx, rackbox.Options{Bin: filepath.Join(root, ".toolchain", "bin"), CRDs: crds})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(b.Logs())
		}
		_ = b.Stop()
	})
	c := b.Client

	rack := rackbox.NVL72("small").WithGPUs(8)
	require.Equal(t, 2, rack.Trays)
	require.NoError(t, b.AddRack(ctx, rack))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "box"}}
	require.NoError(t, c.Create(ctx, ns))

	t.Run("claims bind through the PV controller", func(t *testing.T) {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "box", Name: "cache"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1000Gi")}},
			},
		}
		require.NoError(t, c.Create(ctx, pvc))
		require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the claim is bound", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)
			return err == nil && pvc.Status.Phase == corev1.ClaimBound, err
		}))
		assert.Equal(t, rackbox.StorageClass, *pvc.Spec.StorageClassName, "the default class, set by admission")
	})

	t.Run("Jobs succeed, or fail with the failing image", func(t *testing.T) {
		for image, want := range map[string]batchv1.JobConditionType{"busybox:1.36": batchv1.JobComplete, rackbox.FailingImage: batchv1.JobFailed} {
			job := &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Namespace: "box", GenerateName: "job-"},
				Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: image}},
				}}},
			}
			require.NoError(t, c.Create(ctx, job))
			assert.NoError(t, jobReaches(ctx, c, job, want), image)
		}
	})

	// A held pod (a benchmark run's, whatever its image, or one with HeldImage) stays Running until
	// the test sets its exit code.
	t.Run("held Job pods end with the exit code the test sets", func(t *testing.T) {
		for i, code := range []string{"0", "1", "0", "1"} {
			want := map[string]batchv1.JobConditionType{"0": batchv1.JobComplete, "1": batchv1.JobFailed}[code]
			template := corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{rackbox.HeldLabel: "run"}},
				Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
			}
			if i >= 2 {
				template.Labels, template.Spec.Containers[0].Image = nil, rackbox.HeldImage
			}
			job := &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Namespace: "box", GenerateName: "held-"},
				Spec:       batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: template},
			}
			require.NoError(t, c.Create(ctx, job))
			var pod corev1.Pod
			require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the held Job's pod runs", func(ctx context.Context) (bool, error) {
				var pods corev1.PodList
				if err := c.List(ctx, &pods, client.InNamespace("box"), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil || len(pods.Items) == 0 {
					return false, err
				}
				pod = pods.Items[0]
				return pod.Status.Phase == corev1.PodRunning, nil
			}))
			// Still Running once a plain Job started beside it has run through the stage that
			// ends Job pods.
			plain := &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Namespace: "box", GenerateName: "plain-"},
				Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
				}}},
			}
			require.NoError(t, c.Create(ctx, plain))
			require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the plain Job succeeds", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(plain), plain)
				return err == nil && plain.Status.Succeeded == 1, err
			}))
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(&pod), &pod))
			assert.Equal(t, corev1.PodRunning, pod.Status.Phase, "held until its exit code is set")

			patch := client.MergeFrom(pod.DeepCopy())
			pod.Annotations = map[string]string{rackbox.ExitCodeAnnotation: code}
			require.NoError(t, c.Patch(ctx, &pod, patch))
			assert.NoError(t, jobReaches(ctx, c, job, want), "exit code %s", code)
		}
	})

	t.Run("exec reaches the node's kubelet through the API server", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "box", Name: "shell"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
		}
		require.NoError(t, c.Create(ctx, pod))
		require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the pod runs", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			return err == nil && pod.Status.Phase == corev1.PodRunning, err
		}))
		kube, err := kubernetes.NewForConfig(b.Config)
		require.NoError(t, err)
		exec := benchmark.PodExecutor{Config: b.Config, Client: kube}

		// No handler: the exec fails, as in a container without the command.
		err = exec.Exec(ctx, "box", "shell", "main", []string{"true"}, nil, io.Discard)
		require.ErrorContains(t, err, "no container runtime in the box")

		seen := make(chan string, 4)
		remove := b.HandleExec("box", func(_ context.Context, p *corev1.Pod, container string, command []string, stdin io.Reader, stdout, _ io.Writer) error {
			seen <- p.Spec.NodeName + " " + container
			switch command[0] {
			case "false":
				return osexec.Command("false").Run()
			case "killed":
				return osexec.Command("sh", "-c", "kill -KILL $$").Run()
			case "true":
				return nil
			}
			in, _ := io.ReadAll(stdin)
			_, err := fmt.Fprintf(stdout, "%s <%s>", strings.Join(command, " "), in)
			return err
		})
		defer remove()
		var out strings.Builder
		require.NoError(t, exec.Exec(ctx, "box", "shell", "main", []string{"cat", "-"}, strings.NewReader("stdin"), &out))
		assert.Equal(t, "cat - <stdin>", out.String())
		assert.Equal(t, pod.Spec.NodeName+" main", <-seen, "the scheduler's node, the named container")
		assert.ErrorContains(t, exec.Exec(ctx, "box", "shell", "main", []string{"false"}, nil, io.Discard), "exit code 1")
		<-seen
		assert.ErrorContains(t, exec.Exec(ctx, "box", "shell", "other", []string{"true"}, nil, io.Discard), "is not valid for pod")

		assert.ErrorContains(t, exec.Exec(ctx, "box", "shell", "main", []string{"killed"}, nil, io.Discard), "exit code 137",
			"a command a signal ended: 128 plus its number, as a container runtime reports it")
		<-seen

		// Only the API server, with its kubelet client certificate, reaches the endpoint: a
		// client without one, or with one another CA signed, is refused in the TLS handshake,
		// before any command runs.
		node := &corev1.Node{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node))
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		require.NotZero(t, port, "kwok wrote the endpoint's port into the node")
		require.NotEmpty(t, node.Status.Addresses)
		assert.Equal(t, "127.0.0.1", node.Status.Addresses[0].Address)
		post := func(cfg *tls.Config) error {
			direct := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
			defer direct.CloseIdleConnections()
			resp, err := direct.Post(fmt.Sprintf("https://127.0.0.1:%d/exec/box/shell/main?command=true&output=1", port), "", nil)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		apiServers, err := b.KubeletClientTLS(true)
		require.NoError(t, err)
		require.NoError(t, post(apiServers),
			"with the API server's client certificate the handshake passes, the endpoint's certificate the kubelet CA's for 127.0.0.1 (a plain POST then opens no exec stream)")
		assert.ErrorContains(t, post(&tls.Config{InsecureSkipVerify: true}), "certificate", //nolint:gosec // the attacker's client
			"no client certificate (TLS 1.3: certificate required; 1.2: bad certificate)")
		foreign, err := b.KubeletClientTLS(false)
		require.NoError(t, err)
		assert.ErrorContains(t, post(foreign), "certificate", "a client certificate another CA signed")
		assert.Empty(t, seen, "no command ran")

		// The API server checks the endpoint's serving certificate against the kubelet CA: one
		// another CA signed fails the exec before any command runs.
		restore, err := b.ServeForeignCertificate()
		require.NoError(t, err)
		err = exec.Exec(ctx, "box", "shell", "main", []string{"true"}, nil, io.Discard)
		restore()
		assert.ErrorContains(t, err, "certificate signed by unknown authority")
		assert.Empty(t, seen, "no command ran")
		require.NoError(t, exec.Exec(ctx, "box", "shell", "main", []string{"true"}, nil, io.Discard), "its own certificate again")
		<-seen
		// An exec's connection is let go when it ends.
		assert.NoError(t, poll.True(ctx, 10*time.Second, 100*time.Millisecond, "the exec connections are let go", func() bool { return b.ExecConnections() == 0 }))
		require.NoError(t, c.Delete(ctx, pod))
	})

	t.Run("GPU pods fill the rack and the channel is allocated per tray", func(t *testing.T) {
		cd := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
			"channel": map[string]any{"resourceClaimTemplate": map[string]any{"name": "cd-channel"}},
		}}}
		cd.SetGroupVersionKind(rackbox.ComputeDomainGVK)
		cd.SetNamespace("box")
		cd.SetName("cd")
		require.NoError(t, c.Create(ctx, cd))
		rct := &resourcev1.ResourceClaimTemplate{}
		require.NoError(t, poll.Until(ctx, 30*time.Second, 200*time.Millisecond, "the compute-domain-controller creates the channel template of the ComputeDomain", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: "box", Name: "cd-channel"}, rct)
			return err == nil, err
		}))
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cd), cd))
		assert.Contains(t, cd.GetFinalizers(), rackbox.ComputeDomainFinalizer, "the controller owns the ComputeDomain's finalizer")
		assert.Equal(t, map[string]string{"resource.nvidia.com/computeDomain": string(cd.GetUID()), "resource.nvidia.com/computeDomainTarget": "Workload"}, rct.Labels)
		assert.Equal(t, rackbox.ChannelDeviceClass, rct.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName)
		// Its IMEX DaemonSet, in the driver's namespace, selects the trays the kubelet plugin labels
		// for the domain.
		ds := &appsv1.DaemonSet{}
		require.NoError(t, poll.Until(ctx, 30*time.Second, 200*time.Millisecond, "the compute-domain-controller creates the IMEX DaemonSet", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: rackbox.DriverNamespace, Name: "computedomain-daemon-" + string(cd.GetUID())}, ds)
			return err == nil, err
		}))
		assert.Equal(t, map[string]string{rackbox.ComputeDomainLabel: string(cd.GetUID())}, ds.Spec.Template.Spec.NodeSelector)

		// The second tray's IMEX daemon never gets Ready (the box plays it so).
		require.NoError(t, b.AnnotateNode(ctx, "small-tray-02", rackbox.IMEXTroubleAnnotation, rackbox.TroubleNeverReady))
		labels := map[string]string{"app": "worker"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "box", Name: "worker"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](3),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Tolerations: []corev1.Toleration{{Key: corev1.LabelArchStable, Operator: corev1.TolerationOpEqual, Value: "arm64", Effect: corev1.TaintEffectNoSchedule}},
						Containers: []corev1.Container{{Name: "main", Image: "vllm", Resources: corev1.ResourceRequirements{
							Limits: corev1.ResourceList{rackbox.GPU: resource.MustParse("4")},
							Claims: []corev1.ResourceClaim{{Name: "channel"}},
						}}},
						ResourceClaims: []corev1.PodResourceClaim{{Name: "channel", ResourceClaimTemplateName: ptr.To("cd-channel")}},
					},
				},
			},
		}
		require.NoError(t, c.Create(ctx, d))
		var pods corev1.PodList
		// phases counts the workers by tray and phase, and those the scheduler cannot place.
		phases := func(ctx context.Context) (map[string]corev1.PodPhase, int, error) {
			if err := c.List(ctx, &pods, client.InNamespace("box"), client.MatchingLabels(labels)); err != nil {
				return nil, 0, err
			}
			on, unschedulable := map[string]corev1.PodPhase{}, 0
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					on[p.Spec.NodeName] = p.Status.Phase
				}
				if cond := podCondition(&p, corev1.PodScheduled); cond != nil && cond.Reason == corev1.PodReasonUnschedulable && strings.Contains(cond.Message, "Insufficient nvidia.com/gpu") {
					unschedulable++
				}
			}
			return on, unschedulable, nil
		}
		waiting := map[string]corev1.PodPhase{"small-tray-01": corev1.PodRunning, "small-tray-02": corev1.PodPending}
		err := poll.Until(ctx, time.Minute, 200*time.Millisecond, "a worker runs on the first tray; the second's waits for its IMEX daemon; the third waits for GPUs", func(ctx context.Context) (bool, error) {
			on, unschedulable, err := phases(ctx)
			return err == nil && assert.ObjectsAreEqual(waiting, on) && unschedulable == 1, err
		})
		require.NoError(t, err, "%v", &pods)
		uid := string(cd.GetUID())
		var waiter corev1.Pod
		for _, p := range pods.Items {
			if p.Spec.NodeName == "small-tray-02" {
				waiter = p
			}
		}
		require.NoError(t, poll.Until(ctx, 30*time.Second, 200*time.Millisecond, "the kubelet records why the second tray's worker does not start", func(ctx context.Context) (bool, error) {
			var events corev1.EventList
			if err := c.List(ctx, &events, client.InNamespace("box")); err != nil {
				return false, err
			}
			for _, e := range events.Items {
				if e.InvolvedObject.UID == waiter.UID && e.Reason == "FailedPrepareDynamicResources" && e.Source == (corev1.EventSource{Component: "kubelet", Host: "small-tray-02"}) &&
					// The plugin retries until the kubelet's call runs out of time: the kubelet's words.
					e.Message == "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources: rpc error: code = DeadlineExceeded desc = context deadline exceeded" {
					return true, nil
				}
			}
			return false, nil
		}))
		trays := func(want map[string]string) func(ctx context.Context) (bool, error) {
			return func(ctx context.Context) (bool, error) {
				var cliques unstructured.UnstructuredList
				cliques.SetAPIVersion("resource.nvidia.com/v1beta1")
				cliques.SetKind("ComputeDomainCliqueList")
				if err := c.List(ctx, &cliques, client.InNamespace(rackbox.DriverNamespace), client.MatchingLabels{rackbox.ComputeDomainLabel: uid}); err != nil || len(cliques.Items) != 1 {
					return false, err
				}
				if err := c.Get(ctx, client.ObjectKeyFromObject(cd), cd); err != nil {
					return false, err
				}
				inClique, inStatus := map[string]string{}, map[string]string{}
				daemons, _, _ := unstructured.NestedSlice(cliques.Items[0].Object, "daemons")
				for _, d := range daemons {
					m := d.(map[string]any)
					inClique[m["nodeName"].(string)] = m["status"].(string)
				}
				nodes, _, _ := unstructured.NestedSlice(cd.Object, "status", "nodes")
				for _, n := range nodes {
					m := n.(map[string]any)
					inStatus[m["name"].(string)] = m["status"].(string)
				}
				return assert.ObjectsAreEqual(want, inClique) && assert.ObjectsAreEqual(want, inStatus), nil
			}
		}
		// The chain as on a real tray: the plugin labels both trays for the domain, the real
		// DaemonSet places a daemon on each, each daemon enters its tray in the clique, and the
		// real controller copies the clique into the domain's status.
		require.NoError(t, poll.Until(ctx, 30*time.Second, 200*time.Millisecond, "both trays in the clique and the domain's status, the second NotReady", trays(map[string]string{
			"small-tray-01": "Ready", "small-tray-02": "NotReady",
		})), "%v", cd.Object["status"])
		for _, tray := range []string{"small-tray-01", "small-tray-02"} {
			var n corev1.Node
			require.NoError(t, c.Get(ctx, client.ObjectKey{Name: tray}, &n))
			assert.Equal(t, uid, n.Labels[rackbox.ComputeDomainLabel], "%s is labelled for the domain", tray)
		}

		// The daemon replaced by a healthy one: the worker it held starts.
		require.NoError(t, b.AnnotateNode(ctx, "small-tray-02", rackbox.IMEXTroubleAnnotation, ""))
		var daemons corev1.PodList
		require.NoError(t, c.List(ctx, &daemons, client.InNamespace(rackbox.DriverNamespace), client.MatchingLabels{rackbox.ComputeDomainLabel: uid}))
		require.Len(t, daemons.Items, 2)
		for _, p := range daemons.Items {
			if p.Spec.NodeName == "small-tray-02" {
				require.NoError(t, c.Delete(ctx, &p))
			}
		}
		require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "both trays Ready in the domain", trays(map[string]string{
			"small-tray-01": "Ready", "small-tray-02": "Ready",
		})), "%v", cd.Object["status"])
		running := map[string]corev1.PodPhase{"small-tray-01": corev1.PodRunning, "small-tray-02": corev1.PodRunning}
		err = poll.Until(ctx, time.Minute, 200*time.Millisecond, "both workers run; the third waits for GPUs", func(ctx context.Context) (bool, error) {
			on, unschedulable, err := phases(ctx)
			return err == nil && assert.ObjectsAreEqual(running, on) && unschedulable == 1, err
		})
		require.NoError(t, err, "%v", &pods)

		var claims resourcev1.ResourceClaimList
		require.NoError(t, c.List(ctx, &claims, client.InNamespace("box")))
		allocated := map[string]bool{}
		for _, cl := range claims.Items {
			if cl.Status.Allocation != nil {
				r := cl.Status.Allocation.Devices.Results[0]
				assert.Equal(t, "channel-0", r.Device)
				allocated[r.Pool] = true
			}
		}
		assert.Equal(t, map[string]bool{"small-tray-01": true, "small-tray-02": true}, allocated, "each tray's channel, once")

		require.NoError(t, c.Delete(ctx, d))
		require.NoError(t, c.Delete(ctx, cd))
		require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the garbage collector deletes the pods; the plugin unlabels the trays; the controller deletes the templates and the DaemonSet, then removes its finalizer", func(ctx context.Context) (bool, error) {
			var left corev1.PodList
			if err := c.List(ctx, &left, client.InNamespace("box"), client.MatchingLabels(labels)); err != nil || len(left.Items) > 0 {
				return false, err
			}
			// The plugin takes its label off the trays once no worker holds the channel.
			var nodes corev1.NodeList
			if err := c.List(ctx, &nodes, client.HasLabels{rackbox.ComputeDomainLabel}); err != nil || len(nodes.Items) > 0 {
				return false, err
			}
			// Gone is NotFound: any other error is kept as the wait's last.
			for _, o := range []client.Object{cd, rct, ds} {
				if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
					return false, err
				}
			}
			return true, nil
		}))
	})

	t.Run("a pod that stops after its grace period is there until it ends", func(t *testing.T) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "box", Name: "draining", Annotations: map[string]string{rackbox.StopAnnotation: rackbox.StopAfterGrace}},
			Spec: corev1.PodSpec{NodeName: "cpu-01", TerminationGracePeriodSeconds: ptr.To[int64](3),
				Containers: []corev1.Container{{Name: "main", Image: "engine"}}},
		}
		require.NoError(t, c.Create(ctx, p))
		require.NoError(t, poll.Until(ctx, 30*time.Second, 200*time.Millisecond, "the pod runs", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(p), p)
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		}))
		require.NoError(t, c.Delete(ctx, p))
		// A pod without the annotation is gone half a second after its deletion; this one not
		// before its deletionTimestamp, 3 s after it.
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), p), "still there, within its grace period")
		require.NotNil(t, p.DeletionTimestamp)
		require.NoError(t, poll.Until(ctx, 30*time.Second, 200*time.Millisecond, "the pod is gone after its grace period", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		}))
		assert.False(t, time.Now().Before(p.DeletionTimestamp.Time), "not before its deletionTimestamp")
	})

	// Each trouble a test can give a pod: the status a real kubelet writes in that state. A node
	// made NotReady stays so (the box's kubelets no longer heartbeat it). Last: the node stays
	// NotReady.
	t.Run("troubled pods reach the state a kubelet writes, and a node made NotReady stays so", func(t *testing.T) {
		node := rack.NodeNames()[1]
		for _, trouble := range []string{rackbox.TroubleImagePull, rackbox.TroubleCrashLoop, rackbox.TroubleOOMKilled, rackbox.TroubleNeverReady,
			rackbox.TroubleImageNotFound, rackbox.TroubleRegistryTimeout} {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "box", Name: "trouble-" + trouble, Annotations: map[string]string{rackbox.TroubleAnnotation: trouble}},
				Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9"}}},
			}
			require.NoError(t, c.Create(ctx, pod))
			require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, trouble+": the kubelet's status", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod)
				return err == nil && len(pod.Status.ContainerStatuses) == 1, err
			}))
			st := pod.Status.ContainerStatuses[0]
			assert.False(t, st.Ready, trouble)
			switch trouble {
			case rackbox.TroubleImagePull:
				assert.Equal(t, corev1.PodPending, pod.Status.Phase)
				require.NotNil(t, st.State.Waiting)
				assert.Equal(t, "ImagePullBackOff", st.State.Waiting.Reason)
				assert.Equal(t, `Back-off pulling image "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9"`, st.State.Waiting.Message)
			case rackbox.TroubleCrashLoop, rackbox.TroubleOOMKilled:
				assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
				require.NotNil(t, st.State.Waiting, trouble)
				assert.Equal(t, "CrashLoopBackOff", st.State.Waiting.Reason)
				assert.Contains(t, st.State.Waiting.Message, "restarting failed container=main pod=trouble-"+trouble)
				require.NotNil(t, st.LastTerminationState.Terminated, trouble)
				want := map[string]struct {
					restarts, code int32
					reason         string
				}{rackbox.TroubleCrashLoop: {3, 1, "Error"}, rackbox.TroubleOOMKilled: {1, 137, "OOMKilled"}}[trouble]
				assert.Equal(t, want.restarts, st.RestartCount, trouble)
				assert.Equal(t, want.code, st.LastTerminationState.Terminated.ExitCode, trouble)
				assert.Equal(t, want.reason, st.LastTerminationState.Terminated.Reason, trouble)
			case rackbox.TroubleNeverReady:
				assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
				require.NotNil(t, st.State.Running)
				assert.True(t, *st.Started)
				// The kubelet's word on why: its Unhealthy event on the pod.
				require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the Unhealthy event", func(ctx context.Context) (bool, error) {
					var evs corev1.EventList
					if err := c.List(ctx, &evs, client.InNamespace("box")); err != nil {
						return false, err
					}
					for _, e := range evs.Items {
						if e.InvolvedObject.Name == pod.Name && e.Reason == "Unhealthy" && e.Type == corev1.EventTypeWarning {
							return strings.HasPrefix(e.Message, "Readiness probe failed"), nil
						}
					}
					return false, nil
				}))
			case rackbox.TroubleImageNotFound, rackbox.TroubleRegistryTimeout:
				assert.Equal(t, corev1.PodPending, pod.Status.Phase)
				require.NotNil(t, st.State.Waiting)
				assert.Equal(t, "ErrImagePull", st.State.Waiting.Reason)
				want := map[string]string{rackbox.TroubleImageNotFound: "vllm-runtime:9.9.9: not found", rackbox.TroubleRegistryTimeout: "dial tcp 10.0.0.9:443: i/o timeout"}[trouble]
				assert.True(t, strings.HasSuffix(st.State.Waiting.Message, want), st.State.Waiting.Message)
			}
		}

		require.NoError(t, b.MakeNodeNotReady(ctx, node))
		notReady := func(ctx context.Context) (bool, error) {
			var n corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
				return false, err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					return cond.Status == corev1.ConditionUnknown, nil
				}
			}
			return false, nil
		}
		require.NoError(t, poll.Until(ctx, time.Minute, 200*time.Millisecond, "the node is NotReady", notReady))
		// Still NotReady after the box's node stages had their turn (they run within a second).
		time.Sleep(3 * time.Second)
		still, err := notReady(ctx)
		require.NoError(t, err)
		assert.True(t, still, "the box's kubelets leave a node made NotReady alone")
	})
}

// jobReaches waits up to a minute for the Job's condition want; an error says it did not come.
func jobReaches(ctx context.Context, c client.Client, job *batchv1.Job, want batchv1.JobConditionType) error {
	return poll.Until(ctx, time.Minute, 200*time.Millisecond, fmt.Sprintf("Job %s is %s", job.Name, want), func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err
		}
		for _, cond := range job.Status.Conditions {
			if cond.Type == want && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// podCondition is a pod's condition of that type, or nil.
func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
