package teamboundary

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/config"
)

// WorkerRuntimeClassAnnotation on a team namespace (and on PodPolicy) names the RuntimeClass the
// site exempts from Pod Security admission for the workers (PodSecurityConfiguration): the stacks in
// the namespace give it to their workers, and PodPolicy holds them to baseline with the workers'
// one exemption instead.
const WorkerRuntimeClassAnnotation = config.WorkerRuntimeClassAnnotation

// TeamNamespace is a namespace the site hands to a team: Pod Security enforces baseline (and warns
// and audits at it), config.PodPolicyLabel binds the admission policies to it, TeamLabel names the
// team, and the annotation names the workers' exempt RuntimeClass.
func TeamNamespace(team, name, workerRuntimeClass string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				TeamLabel:                                    team,
				config.PodPolicyLabel:                        "baseline",
				"pod-security.kubernetes.io/enforce":         "baseline",
				"pod-security.kubernetes.io/enforce-version": "latest",
				"pod-security.kubernetes.io/warn":            "baseline",
				"pod-security.kubernetes.io/warn-version":    "latest",
				"pod-security.kubernetes.io/audit":           "baseline",
				"pod-security.kubernetes.io/audit-version":   "latest",
			},
			Annotations: map[string]string{WorkerRuntimeClassAnnotation: workerRuntimeClass},
		},
	}
}

// PodSecurityAdmissionConfiguration is the API server's admission configuration file
// (--admission-control-config-file) that exempts the workers' RuntimeClass from Pod Security
// admission: the one way Kubernetes has to let a baseline namespace run a pod that adds
// capabilities, which PodPolicy then checks instead. Pods of that class in a namespace PodPolicy
// is not bound to are exempt from Pod Security altogether: the class is the GPU workers', which
// the site gives to team namespaces only.
func PodSecurityAdmissionConfiguration(runtimeClasses ...string) string {
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: privileged
      enforce-version: latest
    exemptions:
      runtimeClasses: [%s]
`, strings.Join(runtimeClasses, ", "))
}
