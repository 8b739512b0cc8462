package preflight

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/config"
)

var (
	validatingAdmissionPolicies = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	namespacesResource          = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// resolvePodSecurity decides, before anything is registered, the Pod Security level of a namespace
// the stack creates (namespace.podSecurity) and the workers' RuntimeClass, from what the site
// installed:
//   - a namespace the stack creates: with no level set, baseline where the site's pod policy
//     (config.SitePodPolicy) is found, privileged where it is not (or cannot be read, or no cluster
//     is read); at baseline the workers take the class the policy's annotation names unless they
//     name one, and a worker left with none is refused at namespace.podSecurity;
//   - a namespace the stack uses (or adopted): the workers take the class its annotation
//     (config.WorkerRuntimeClassAnnotation: on the site's team namespaces, and on a namespace
//     another stack created at baseline) names, or, in a baseline namespace the site's policy
//     binds that names none, the site's; unless they name one.
//
// The site's worker class on a pod that is not a worker is refused at its key: Pod Security
// admission exempts that class, and only the workers may take it.
func resolvePodSecurity(ctx context.Context, log Log, reader ObjectReader, c *config.Config, meta Ownership) (level, workersClass string, err error) {
	var ps config.Problems
	siteClass := ""
	if reader != nil {
		policy, found, err := reader.Read(ctx, validatingAdmissionPolicies, "", config.SitePodPolicy)
		switch {
		case err != nil && c.Namespace.Create && c.Namespace.PodSecurity == "":
			log.Warn(fmt.Sprintf("cannot read the site's pod policy %s (%v): the namespace the stack creates enforces Pod Security privileged; "+
				"set namespace.podSecurity to choose", config.SitePodPolicy, err))
		case found:
			siteClass = policy.Annotations[config.WorkerRuntimeClassAnnotation]
		}
	}
	created := c.Namespace.Create && !meta.Adopted("Namespace", c.Namespace.Name)
	level = c.Namespace.PodSecurity
	switch {
	case created && level == "" && siteClass != "":
		level = config.PodSecurityBaseline
		workersClass = siteClass
	case created && level == "":
		level = config.PodSecurityPrivileged
	case created && level == config.PodSecurityBaseline:
		workersClass = siteClass
	case !created && reader != nil:
		ns, found, err := reader.Read(ctx, namespacesResource, "", c.Namespace.Name)
		if err == nil && found {
			workersClass = ns.Annotations[config.WorkerRuntimeClassAnnotation]
			if workersClass == "" && ns.Labels["pod-security.kubernetes.io/enforce"] == config.PodSecurityBaseline && ns.Labels[config.PodPolicyLabel] != "" {
				// A baseline namespace the site's policy binds, which names no class: the site's.
				workersClass = siteClass
			}
		}
	}
	for _, r := range c.Workers() {
		if created && level == config.PodSecurityBaseline && r.Config.Scheduling.RuntimeClassName == "" && workersClass == "" {
			ps.Add("namespace.podSecurity", "baseline refuses the workers' capabilities (%s) unless the API server exempts their RuntimeClass, and %s.scheduling.runtimeClassName is empty "+
				"with no site install found to name it (%s): set it to the class the API server exempts, install the site (docs/security.md), "+
				"or set namespace.podSecurity to privileged on a cluster that exempts none", strings.Join(config.WorkerCapabilityNames(), ", "), r.Key, config.SitePodPolicy)
		}
	}
	if siteClass != "" {
		for key, s := range map[string]string{"frontend.scheduling.runtimeClassName": c.Frontend.Scheduling.RuntimeClassName,
			"modelDownload.scheduling.runtimeClassName": c.ModelDownload.Scheduling.RuntimeClassName} {
			if s == siteClass {
				ps.Add(key, "%q is the GPU workers' RuntimeClass, which the API server exempts from Pod Security: no other pod may take it", s)
			}
		}
	}
	if len(ps) > 0 {
		return "", "", ps
	}
	return level, workersClass, nil
}
