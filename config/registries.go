package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
)

// DefaultImageRegistries are where the recipe's own images come from: NVIDIA's organization on
// NGC (the Dynamo runtime, AIPerf) and Docker Hub's official images (the download's Python, the
// benchmark's helper), not every organization of either registry.
var DefaultImageRegistries = []string{"nvcr.io/nvidia", "docker.io/library"}

// imageRegistries checks that every image the stack deploys comes from a registry the site
// allows (imageRegistries): the runtime, the download, the smoke test, the benchmark, and every
// container a role's podTemplatePatch adds or changes. An entry is a registry ("nvcr.io") or a
// repository prefix under one ("registry.example.com/team-a"); Docker Hub's short names
// (python:3.10-slim) are docker.io's.
func (c *Config) imageRegistries(v validator) {
	for i, r := range c.ImageRegistries {
		if _, err := reference.ParseNormalizedNamed(strings.TrimSuffix(r, "/") + "/x"); err != nil || r == "" || strings.Contains(r, "@") {
			v.add(fmt.Sprintf("imageRegistries[%d]", i), "%q is not a registry (nvcr.io) or a repository prefix under one (registry.example.com/team-a)", r)
		}
	}
	if len(c.ImageRegistries) == 0 {
		v.add("imageRegistries", "lists no registry, so no image could be deployed: name the ones the site allows (default %s)", strings.Join(DefaultImageRegistries, ", "))
		return
	}
	check := func(key, image string) {
		if image == "" || c.RegistryAllowed(image) {
			return
		}
		v.add(key, "%q is not from a registry imageRegistries allows (%s)", image, strings.Join(c.ImageRegistries, ", "))
	}
	check("image", c.Image)
	if c.ModelDownload.Enabled {
		check("modelDownload.image", c.ModelDownload.Image)
	}
	check("smokeTest.image", c.SmokeTest.Image)
	check("benchmark.image", c.Benchmark.Image)
	check("benchmark.helperImage", c.Benchmark.HelperImage)
	if c.InferencePool() {
		check("exposure.endpointPicker.image", c.Exposure.EndpointPicker.Image)
	}
	patches := map[string]PodTemplatePatch{"frontend.podTemplatePatch": c.Frontend.PodTemplatePatch}
	if c.Profile == Aggregated || c.Profile == Disaggregated {
		for _, r := range c.Workers() {
			patches[r.Key+".podTemplatePatch"] = r.Config.PodTemplatePatch
		}
	}
	for _, key := range slices.Sorted(maps.Keys(patches)) {
		// What the patch sets: the main container's own image is `image`, checked above.
		patched, err := patches[key].Apply(corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: MainContainer}}}})
		if err != nil || len(patches[key]) == 0 {
			continue // the patch's own problem is reported at its key
		}
		for i, ct := range patched.Spec.Containers {
			check(fmt.Sprintf("%s.spec.containers[%d].image", key, i), ct.Image)
		}
		for i, ct := range patched.Spec.InitContainers {
			check(fmt.Sprintf("%s.spec.initContainers[%d].image", key, i), ct.Image)
		}
	}
}

// RegistryAllowed says whether an image is from a registry (or under a repository prefix)
// imageRegistries allows.
func (c *Config) RegistryAllowed(image string) bool {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return false
	}
	name := named.Name() // docker.io/library/python, nvcr.io/nvidia/ai-dynamo/vllm-runtime
	for _, r := range c.ImageRegistries {
		r = strings.TrimSuffix(r, "/")
		if prefix, err := reference.ParseNormalizedNamed(r + "/x"); err == nil {
			r = strings.TrimSuffix(prefix.Name(), "/x")
		}
		if name == r || strings.HasPrefix(name, r+"/") {
			return true
		}
	}
	return false
}
