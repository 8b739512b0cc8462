package rackbox

import (
	"fmt"
	"regexp"
	"strings"
)

// Registry is the registry of the box's own images (FailingImage, HeldImage): a stack that uses
// them lists it in imageRegistries.
const Registry = "registry.rackbox.invalid"

// FailingImage is an image whose containers exit 1 in the box: a test that wants a Job's pod to
// fail (a broken download, a smoke test that gets no answer) gives the Job this image. Every
// other Job pod succeeds, every other pod runs and is Ready.
const FailingImage = "registry.rackbox.invalid/exit-1:latest"

// A benchmark run's Job pods (the AIPerf Jobs' pods, which carry HeldLabel) stay Running until a test
// that plays AIPerf has written its artifacts and sets ExitCodeAnnotation to "0" or "1": only then
// does the pod end, with that exit code. AIPerf needs a served model, so it never runs here. A Job
// pod whose image is HeldImage is held the same way: a test gives a Job (the model download) this
// image to decide when it ends.
const (
	HeldLabel          = "minimax-m3.io/benchmark-run"
	HeldImage          = "registry.rackbox.invalid/held:1"
	ExitCodeAnnotation = "rackbox.minimax-m3.io/exit-code"
)

// lifeStages, with the stages that end pods (podEnd) and deleteStages, are kwok's configuration
// (stages): how the box's simulated kubelets move nodes and pods through their lives. Written for
// the box after kwok's own stage library (kustomize/stage: node-initialize,
// node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete, pod-container-running-failed):
//   - a node becomes Ready with the capacity it registered, its kubelet endpoint the box's exec
//     server (kubelet.go) on 127.0.0.1;
//   - a pod bound to a node starts and is Ready about a second later (no image is pulled and no
//     process runs: readiness here says the pod would have started, not that a model is loaded);
//   - a Job's pod then exits 0, or 1 when its image is FailingImage (a benchmark run's pod when the
//     test sets ExitCodeAnnotation); the smoke test's pod (label
//     app.kubernetes.io/component=smoke-test) leaves the result its script would write in its
//     termination message: passed, or HTTP 503 with FailingImage (no model runs here);
//   - a deleted pod is gone a second later, once its finalizers are.
const lifeStages = `
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.annotations["rackbox.minimax-m3.io/trouble"]'
      operator: 'DoesNotExist'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      addresses:
      - address: {{ NodeIP | Quote }}
        type: InternalIP
      - address: {{ NodeName | Quote }}
        type: Hostname
      {{ with NodePort }}
      daemonEndpoints:
        kubeletEndpoint:
          Port: {{ . }}
      {{ end }}
      allocatable:
      {{ YAML .status.allocatable 1 }}
      capacity:
      {{ YAML .status.capacity 1 }}
      nodeInfo:
        architecture: {{ index .metadata.labels "kubernetes.io/arch" | Quote }}
        kubeletVersion: rackbox
        operatingSystem: linux
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat-with-lease
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.annotations["rackbox.minimax-m3.io/trouble"]'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['True']
  delay:
    durationMilliseconds: 600000
    jitterDurationMilliseconds: 610000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
`

// podReadyStage starts a pod bound to a node and makes it Ready about a second later (see
// lifeStages); claimGated runs it only once a pod's DRA claims are prepared.
const podReadyStage = `
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.metadata.annotations["rackbox.minimax-m3.io/trouble"]'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
  delay:
    durationMilliseconds: 500
    jitterDurationMilliseconds: 1000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: PodScheduled
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
      phase: Running
      startTime: {{ $now | Quote }}
`

// A pod annotated StopAnnotation: StopAfterGrace takes its whole terminationGracePeriodSeconds to
// stop once deleted, as an engine that drains its requests until the kubelet kills it: its GPUs
// are held until then. Every other deleted pod is gone half a second later (an engine that exits
// at once on SIGTERM).
const (
	StopAnnotation = "rackbox.minimax-m3.io/stop"
	StopAfterGrace = "after-grace"
)

// deleteStages remove a deleted pod once its finalizers are gone (see lifeStages): half a second
// later, or at the end of its grace period (StopAfterGrace; the API server sets its
// deletionTimestamp that far ahead).
var deleteStages = podDelete("pod-delete", match(`.metadata.annotations["`+StopAnnotation+`"]`, "NotIn", StopAfterGrace), `
    durationMilliseconds: 500`) +
	"---" + podDelete("pod-delete-after-grace", match(`.metadata.annotations["`+StopAnnotation+`"]`, "In", StopAfterGrace), `
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.deletionTimestamp'`)

// podDelete is a stage that deletes a pod the selector picks once it is being deleted and its
// finalizers are gone, after delay (the YAML of the stage's delay).
func podDelete(name, selector, delay string) string {
	return fmt.Sprintf(`
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: %s
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.metadata.finalizers'
      operator: 'DoesNotExist'
%s  delay:%s
  next:
    delete: true
`, name, selector, delay)
}

// stages is kwok's configuration: lifeStages, podReadyStage, the stages that end Job and smoke-test
// pods, the troubles and deleteStages.
var stages = lifeStages + claimGated(podReadyStage) + strings.Join([]string{
	podEnd("job-pod-succeed", []string{
		match(".metadata.ownerReferences.[].kind", "In", "Job"),
		match(`.metadata.labels["app.kubernetes.io/component"]`, "NotIn", "smoke-test"),
		match(".spec.containers.[0].image", "NotIn", FailingImage),
		match(".spec.containers.[0].image", "NotIn", HeldImage),
		absent(`.metadata.labels["` + HeldLabel + `"]`),
	}, 0, "Completed", "", "Succeeded"),
	podEnd("held-image-succeed", []string{
		match(".metadata.ownerReferences.[].kind", "In", "Job"),
		match(".spec.containers.[0].image", "In", HeldImage),
		match(`.metadata.annotations["`+ExitCodeAnnotation+`"]`, "In", "0"),
	}, 0, "Completed", "", "Succeeded"),
	podEnd("held-image-fail", []string{
		match(".metadata.ownerReferences.[].kind", "In", "Job"),
		match(".spec.containers.[0].image", "In", HeldImage),
		match(`.metadata.annotations["`+ExitCodeAnnotation+`"]`, "In", "1"),
	}, 1, "Error", "exit status 1 (set by the test)", "Failed"),
	podEnd("held-pod-succeed", []string{
		match(".metadata.ownerReferences.[].kind", "In", "Job"),
		present(`.metadata.labels["` + HeldLabel + `"]`),
		match(`.metadata.annotations["`+ExitCodeAnnotation+`"]`, "In", "0"),
	}, 0, "Completed", "", "Succeeded"),
	podEnd("held-pod-fail", []string{
		match(".metadata.ownerReferences.[].kind", "In", "Job"),
		present(`.metadata.labels["` + HeldLabel + `"]`),
		match(`.metadata.annotations["`+ExitCodeAnnotation+`"]`, "In", "1"),
	}, 1, "Error", "exit status 1 (set by the test)", "Failed"),
	podEnd("job-pod-fail", []string{
		match(`.metadata.labels["app.kubernetes.io/component"]`, "NotIn", "smoke-test"),
		match(".spec.containers.[0].image", "In", FailingImage),
		absent(`.metadata.labels["` + HeldLabel + `"]`),
	}, 1, "Error", "exit status 1 (the box's FailingImage)", "Failed"),
	podEnd("smoke-test-pass", []string{
		match(`.metadata.labels["app.kubernetes.io/component"]`, "In", "smoke-test"),
		match(".spec.containers.[0].image", "NotIn", FailingImage),
	}, 0, "Completed", `{"passed": true, "status": 200, "latencyMs": 1, "reply": "(rackbox: no model runs here; this result is set by a kwok stage)"}`, "Succeeded"),
	podEnd("smoke-test-fail", []string{
		match(`.metadata.labels["app.kubernetes.io/component"]`, "In", "smoke-test"),
		match(".spec.containers.[0].image", "In", FailingImage),
	}, 1, "Error", `{"passed": false, "request": "POST /v1/chat/completions", "status": 503, "body": "(rackbox: no model runs here; this result is set by a kwok stage)"}`, "Failed"),
}, "") + claimGated(troubleStages) + "---" + deleteStages

// claimGated is each stage of stages (YAML documents) that starts a pod, twice: for a pod without
// DRA claims, and (named <stage>-claims-prepared) for a pod whose claims the box's kubelet plugin
// has prepared (ClaimsPreparedAnnotation, imex.go). A kubelet starts no container of a pod whose
// claims are not prepared; kwok's selectors cannot say "or", hence the two.
func claimGated(stages string) string {
	var out strings.Builder
	for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(stages, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		for _, gate := range []struct{ suffix, expr string }{
			{"", absent(".spec.resourceClaims")},
			{"-claims-prepared", match(`.metadata.annotations["`+ClaimsPreparedAnnotation+`"]`, "In", "true")},
		} {
			d := stageName.ReplaceAllString(doc, "${1}"+gate.suffix)
			d = strings.Replace(d, "    matchExpressions:\n", "    matchExpressions:\n"+gate.expr, 1)
			out.WriteString("---" + d)
		}
	}
	return out.String()
}

// stageName is a stage's name in its YAML.
var stageName = regexp.MustCompile(`(?m)^(  name: \S+)$`)

// match is one of a stage selector's matchExpressions.
func match(key, operator, value string) string {
	return fmt.Sprintf("    - key: %s\n      operator: '%s'\n      values: [%s]\n", yamlQuote(key), operator, yamlQuote(value))
}

// absent and present are matchExpressions that hold when key selects nothing, or something.
func absent(key string) string {
	return fmt.Sprintf("    - key: %s\n      operator: 'DoesNotExist'\n", yamlQuote(key))
}

func present(key string) string {
	return fmt.Sprintf("    - key: %s\n      operator: 'Exists'\n", yamlQuote(key))
}

// yamlQuote is a YAML single-quoted scalar.
func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// podEnd is a stage that ends a running pod the selector picks a second after it runs: every
// container terminates with exitCode, reason and a termination message (none when empty), the pod
// is no longer Ready, and its phase becomes phase.
func podEnd(name string, selector []string, exitCode int, reason, message, phase string) string {
	msg := ""
	if message != "" {
		msg = "\n            message: " + yamlQuote(message)
	}
	return fmt.Sprintf(`---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: %[1]s
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
%[2]s  delay:
    durationMilliseconds: 1000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: Pod%[3]s
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: Pod%[3]s
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: %[4]d
            finishedAt: {{ $now | Quote }}
            reason: %[5]s%[6]s
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: %[7]s
`, name, strings.Join(selector, ""), map[string]string{"Succeeded": "Completed", "Failed": "Failed"}[phase], exitCode, reason, msg, phase)
}
