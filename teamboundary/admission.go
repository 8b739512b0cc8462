package teamboundary

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/config"
)

// PolicyName names the ValidatingAdmissionPolicy and its binding.
const PolicyName = config.SitePodPolicy

// TeamLabel is on every team namespace the site installs, with the team's name; a team may not
// label a namespace (namespaces are the site's).
const TeamLabel = "minimax-m3.io/team"

// baselineCapabilities are the capabilities Pod Security baseline lets a container add.
var baselineCapabilities = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// safeSysctls are the sysctls Pod Security baseline allows (its latest version).
var safeSysctls = []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
	"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}

// seLinuxTypes are the SELinux types Pod Security baseline allows (besides none).
var seLinuxTypes = []string{"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// celList is a CEL list literal of strings.
func celList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// PodPolicy is the ValidatingAdmissionPolicy the API server itself runs on every pod created or
// changed in a team namespace: Pod Security baseline written in CEL with the one exemption a worker
// needs (its main container adds config.WorkerCapabilities and runs as root), and the fleet's rules
// config.PodSecurity checks before anything is applied. It holds for whoever writes the pod: the
// Dynamo operator for a graph, a Job controller, or a team's `kubectl apply` outside Pulumi.
// priorityClasses are the classes a pod may name; workerRuntimeClass is the RuntimeClass the API
// server exempts from Pod Security admission, which only a worker may take.
func PodPolicy(priorityClasses []string, workerRuntimeClass string) *admissionv1.ValidatingAdmissionPolicy {
	fail := admissionv1.Fail
	c := func(expr, msg string) admissionv1.Validation {
		return admissionv1.Validation{Expression: expr, Message: msg}
	}
	// Every security context of the pod and its containers.
	containerRule := func(test, msg string) admissionv1.Validation {
		return c("variables.containers.all(c, "+test+")", msg)
	}
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		// The workers' class, which the stacks read to give it to their workers (and to no other pod).
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Annotations: map[string]string{config.WorkerRuntimeClassAnnotation: workerRuntimeClass}},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/ephemeralcontainers"}},
				},
			}}},
			Variables: []admissionv1.Variable{
				// A worker by the operator's label, and no Job's pod: a team writes Jobs, whose pod
				// templates could carry the label (bare pods and Deployments it may not write).
				{Name: "worker", Expression: fmt.Sprintf("has(object.metadata.labels) && 'nvidia.com/dynamo-component-type' in object.metadata.labels && object.metadata.labels['nvidia.com/dynamo-component-type'] in %s && !(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, o.kind == 'Job'))", celList(config.WorkerComponentTypes))},
				{Name: "containers", Expression: "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"},
			},
			Validations: []admissionv1.Validation{
				c("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
					"Pod Security baseline: host namespaces (hostNetwork, hostPID, hostIPC)"),
				c("!has(object.spec.volumes) || object.spec.volumes.all(v, has(v.configMap) || has(v.downwardAPI) || has(v.emptyDir) || has(v.persistentVolumeClaim) || has(v.projected) || has(v.secret))",
					"volumes: a team's pods mount only "+strings.Join(config.AllowedVolumeTypes, ", ")+" (no hostPath, nfs, csi, ephemeral, gitRepo, ...)"),
				containerRule("!has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged",
					"Pod Security baseline: privileged containers"),
				containerRule(fmt.Sprintf("!has(c.securityContext) || !has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.all(cap, cap in %s || (variables.worker && c.name == %q && cap in %s))",
					celList(baselineCapabilities), config.MainContainer, celList(config.WorkerCapabilityNames())),
					"Pod Security baseline: non-default capabilities (a worker's main container alone adds "+strings.Join(config.WorkerCapabilityNames(), ", ")+")"),
				containerRule("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)", "Pod Security baseline: hostPort"),
				containerRule("!has(c.securityContext) || !has(c.securityContext.procMount) || c.securityContext.procMount == 'Default'", "Pod Security baseline: procMount"),
				c("(!has(object.spec.securityContext) || !has(object.spec.securityContext.seccompProfile) || object.spec.securityContext.seccompProfile.type != 'Unconfined') && variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.seccompProfile) || c.securityContext.seccompProfile.type != 'Unconfined')",
					"Pod Security baseline: seccompProfile Unconfined"),
				c("(!has(object.spec.securityContext) || !has(object.spec.securityContext.appArmorProfile) || object.spec.securityContext.appArmorProfile.type != 'Unconfined') && variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.appArmorProfile) || c.securityContext.appArmorProfile.type != 'Unconfined') && (!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith('container.apparmor.security.beta.kubernetes.io/') || object.metadata.annotations[k] != 'unconfined'))",
					"Pod Security baseline: AppArmor profile Unconfined"),
				c(fmt.Sprintf("(!has(object.spec.securityContext) || !has(object.spec.securityContext.seLinuxOptions) || ((!has(object.spec.securityContext.seLinuxOptions.type) || object.spec.securityContext.seLinuxOptions.type in %[1]s) && !has(object.spec.securityContext.seLinuxOptions.user) && !has(object.spec.securityContext.seLinuxOptions.role))) && variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.seLinuxOptions) || ((!has(c.securityContext.seLinuxOptions.type) || c.securityContext.seLinuxOptions.type in %[1]s) && !has(c.securityContext.seLinuxOptions.user) && !has(c.securityContext.seLinuxOptions.role)))",
					celList(seLinuxTypes)),
					"Pod Security baseline: seLinuxOptions (type, user, role)"),
				c(fmt.Sprintf("!has(object.spec.securityContext) || !has(object.spec.securityContext.sysctls) || object.spec.securityContext.sysctls.all(s, s.name in %s)", celList(safeSysctls)),
					"Pod Security baseline: sysctls outside the safe set"),
				c("(!has(object.spec.securityContext) || !has(object.spec.securityContext.runAsUser) || object.spec.securityContext.runAsUser != 0) && variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.runAsUser) || c.securityContext.runAsUser != 0 || (variables.worker && c.name == '"+config.MainContainer+"'))",
					"runAsUser 0 (root): only a worker's main container runs as root"),
				containerRule("!has(c.securityContext) || !has(c.securityContext.allowPrivilegeEscalation) || !c.securityContext.allowPrivilegeEscalation || (variables.worker && c.name == '"+config.MainContainer+"')",
					"allowPrivilegeEscalation: no container of a team's pods but a worker's main container asks for it"),
				c(fmt.Sprintf("!has(object.spec.priorityClassName) || object.spec.priorityClassName == '' || object.spec.priorityClassName in %s", celList(priorityClasses)),
					"priorityClassName: not one of the site's priority classes ("+orNone(priorityClasses)+"): a higher class preempts other teams' pods"),
				c("request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''",
					"nodeName: a team's pod goes through the scheduler, not straight to a node"),
				containerRule(hostProbesTest(), "Pod Security baseline: probe or lifecycle host (the kubelet would reach another host for the pod)"),
				c(fmt.Sprintf("!has(object.spec.runtimeClassName) || object.spec.runtimeClassName != %q || variables.worker", workerRuntimeClass),
					fmt.Sprintf("runtimeClassName: %s, which Pod Security admission exempts, is the GPU workers' alone", workerRuntimeClass)),
				// The Dynamo operator's accounts: the graph's discovery account, the endpoint
				// picker's and the planner's (a team's role creates none of its own).
				c("!has(object.spec.serviceAccountName) || object.spec.serviceAccountName in ['default', 'epp-serviceaccount', 'planner-serviceaccount'] || object.spec.serviceAccountName.endsWith('-k8s-service-discovery')",
					"serviceAccountName: a team's pods run as the namespace's default ServiceAccount, or as the Dynamo operator gives its graph's pods"),
				containerRule("!has(c.envFrom) || c.envFrom.all(f, has(f.secretRef) && !has(f.configMapRef) && (!has(f.prefix) || f.prefix == ''))",
					"envFrom: only a Secret, with no prefix, gives a container its variables wholesale (a ConfigMap or a prefix could carry the runtime's variables)"),
				containerRule(fmt.Sprintf("!has(c.env) || c.env.all(e, !(%s))", runtimeEnvTest("e.name")),
					"env: NVIDIA_* and CUDA_VISIBLE_* are the NVIDIA container runtime's (which devices a container sees)"),
				c("!has(object.spec.ephemeralContainers) || object.spec.ephemeralContainers.all(c, !has(c.securityContext) && (!has(c.env) || c.env.all(e, !("+runtimeEnvTest("e.name")+"))))",
					"ephemeralContainers: a debug container has no security context and none of the runtime's variables"),
			},
		},
	}
}

// hostProbesTest is baseline's check of the probes' and lifecycle hooks' host fields on container c.
func hostProbesTest() string {
	var tests []string
	for _, p := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		for _, h := range []string{"httpGet", "tcpSocket"} {
			tests = append(tests, fmt.Sprintf("(!has(c.%[1]s) || !has(c.%[1]s.%[2]s) || !has(c.%[1]s.%[2]s.host) || c.%[1]s.%[2]s.host == '')", p, h))
		}
	}
	for _, hook := range []string{"postStart", "preStop"} {
		for _, h := range []string{"httpGet", "tcpSocket"} {
			tests = append(tests, fmt.Sprintf("(!has(c.lifecycle) || !has(c.lifecycle.%[1]s) || !has(c.lifecycle.%[1]s.%[2]s) || !has(c.lifecycle.%[1]s.%[2]s.host) || c.lifecycle.%[1]s.%[2]s.host == '')", hook, h))
		}
	}
	return strings.Join(tests, " && ")
}

func runtimeEnvTest(name string) string {
	tests := make([]string, len(config.RuntimeEnvPrefixes))
	for i, p := range config.RuntimeEnvPrefixes {
		tests[i] = fmt.Sprintf("%s.startsWith(%q)", name, p)
	}
	return strings.Join(tests, " || ")
}

// PodPolicyBinding binds PodPolicy to every namespace labelled config.PodPolicyLabel (the team
// namespaces, and the namespaces stacks create at baseline), denying (and recording in the audit
// log) what it refuses.
func PodPolicyBinding() *admissionv1.ValidatingAdmissionPolicyBinding {
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        PolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny, admissionv1.Audit},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: config.PodPolicyLabel, Operator: metav1.LabelSelectorOpExists}},
			}},
		},
	}
}

func orNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

// GraphPolicyName names the policy on graphs and its binding.
const GraphPolicyName = "minimax-m3-team-graphs"

// GraphPolicy refuses, in a team namespace, a DynamoGraphDeployment that sets a variable the
// Dynamo operator writes or the NVIDIA runtime reads (config.OperatorEnv,
// config.RuntimeEnvPrefixes) in the graph's env or a component's pod template, takes a pod's
// environment wholesale (envFrom), or puts a component in the global Dynamo namespace: on the pods
// the operator writes these variables are its own, so the pod policy cannot tell a team's from the
// operator's. It reads v1beta1; the API server converts a request of another version to it first
// (matchPolicy Equivalent), so no version escapes it.
func GraphPolicy() *admissionv1.ValidatingAdmissionPolicy {
	fail := admissionv1.Fail
	equivalent := admissionv1.Equivalent
	reserved := fmt.Sprintf("(%s || e.name in %s)", runtimeEnvTest("e.name"), celList(config.OperatorEnv))
	containers := func(list string) string {
		return fmt.Sprintf("(!has(comp.podTemplate.spec.%[1]s) || comp.podTemplate.spec.%[1]s.all(c, !has(c.envFrom) && (!has(c.env) || c.env.all(e, !%[2]s))))", list, reserved)
	}
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: GraphPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{MatchPolicy: &equivalent, ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"nvidia.com"}, APIVersions: []string{"v1beta1"}, Resources: []string{"dynamographdeployments"}},
				},
			}}},
			Validations: []admissionv1.Validation{
				{
					Expression: fmt.Sprintf("!has(object.spec.env) || object.spec.env.all(e, !%s)", reserved),
					Message:    "spec.env: the graph sets a variable the Dynamo operator writes (" + strings.Join(config.OperatorEnv[:3], ", ") + ", ...) or the NVIDIA runtime reads (NVIDIA_*, CUDA_VISIBLE_*)",
				},
				{
					Expression: fmt.Sprintf("!has(object.spec.components) || object.spec.components.all(comp, !has(comp.podTemplate) || !has(comp.podTemplate.spec) || (%s && %s))",
						containers("containers"), containers("initContainers")),
					Message: "components[].podTemplate: a container sets a variable the Dynamo operator writes or the NVIDIA runtime reads, or takes its environment wholesale (envFrom)",
				},
				{
					Expression: "!has(object.spec.components) || object.spec.components.all(comp, !has(comp.globalDynamoNamespace) || !comp.globalDynamoNamespace)",
					Message:    "components[].globalDynamoNamespace: a team's component stays in its graph's own Dynamo namespace",
				},
			},
		},
	}
}

// GraphPolicyBinding binds GraphPolicy to the namespaces PodPolicyBinding binds.
func GraphPolicyBinding() *admissionv1.ValidatingAdmissionPolicyBinding {
	b := PodPolicyBinding()
	b.Name, b.Spec.PolicyName = GraphPolicyName, GraphPolicyName
	return b
}
