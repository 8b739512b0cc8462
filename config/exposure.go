package config

import (
	"reflect"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ExposureConfig routes clients to the frontend through the site's Gateway (Gateway API): an
// HTTPRoute in the stack's namespace, attached to a Gateway the site runs, for one hostname. Off by
// default: the frontend is then reachable in the cluster only, as the recipe leaves it.
type ExposureConfig struct {
	Enabled bool `json:"enabled"`
	// Gateway is the site's Gateway the route attaches to; the stack never creates or changes it.
	Gateway GatewayRef `json:"gateway"`
	// Hostname is the name clients use; the Gateway's listener must accept it.
	Hostname string `json:"hostname"`
	// PathPrefix is where the OpenAI API sits on the hostname: the route matches <pathPrefix>v1 and
	// hands the frontend /v1 (only the OpenAI API is routed: not the frontend's metrics, docs or
	// admin endpoints).
	PathPrefix string `json:"pathPrefix"`
	// Scheme is how clients reach the listener: https (a TLS listener) or http; it makes the
	// externalURL output.
	Scheme string `json:"scheme"`
	// RequestTimeout bounds one request through the Gateway (a Gateway API duration such as 2h;
	// "0s" for none): an agentic completion streams for many minutes, past a gateway's default.
	RequestTimeout string `json:"requestTimeout"`
	// Backend is what the route sends requests to: BackendFrontend (the graph's frontend Service,
	// whose router picks a worker by its KV cache) or BackendInferencePool (the InferencePool the
	// Dynamo operator makes for the graph's endpoint picker: a gateway that implements the Gateway
	// API Inference Extension asks the picker which worker takes each request, and sends it to the
	// frontend sidecar in that worker's pod).
	Backend string `json:"backend"`
	// EndpointPicker is the graph's endpoint picker, with backend inferencePool.
	EndpointPicker EndpointPickerConfig `json:"endpointPicker"`
	// FrontendSidecar is the frontend container each worker pod gains with backend inferencePool.
	FrontendSidecar FrontendSidecarConfig `json:"frontendSidecar"`
}

// FrontendSidecarConfig is the frontend sidecar of each worker pod (backend inferencePool): it
// runs the runtime image with the frontend's env and extraEnv. Its resources count in the
// worker pod's, on the tray.
type FrontendSidecarConfig struct {
	Resources Resources `json:"resources"`
}

// The route's backends (exposure.backend).
const (
	BackendFrontend      = "frontend"
	BackendInferencePool = "inferencePool"
)

// EndpointPickerConfig is the graph's endpoint picker (EPP): a component of type epp the Dynamo
// operator runs, with the InferencePool it makes for it. It runs where the frontend runs
// (frontend.scheduling).
type EndpointPickerConfig struct {
	// Image is the endpoint picker's image: Dynamo's EPP of the operator's release (the operator
	// takes the picker's settings as eppConfig). Required with backend inferencePool: Dynamo
	// publishes no image under a fixed name, so the site names the one it builds or mirrors.
	Image     string    `json:"image"`
	Resources Resources `json:"resources"`
}

// InferencePool reports whether the route goes to the graph's InferencePool (exposure on, with
// backend inferencePool): the graph then has an endpoint picker, and its workers frontend sidecars.
func (c *Config) InferencePool() bool {
	return c.Exposure.Enabled && c.Exposure.Backend == BackendInferencePool
}

// InferencePoolName is the name of the InferencePool the Dynamo operator makes for the graph's
// endpoint picker.
func (c *Config) InferencePoolName() string { return c.GraphName + "-pool" }

// GatewayRef names a Gateway, and optionally one of its listeners.
type GatewayRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// SectionName is the listener's name; empty attaches to every listener that accepts the route.
	SectionName string `json:"sectionName"`
}

// RouteName is the HTTPRoute's name.
func (c *Config) RouteName() string { return c.GraphName }

// ExternalURL is where clients reach the frontend through the Gateway ("" with exposure off): the
// OpenAI API is under it, at /v1.
func (c *Config) ExternalURL() string {
	e := c.Exposure
	if !e.Enabled {
		return ""
	}
	return e.Scheme + "://" + e.Hostname + c.RoutePrefix()
}

// RoutePrefix is exposure.pathPrefix without its trailing slash ("" for /).
func (c *Config) RoutePrefix() string { return strings.TrimSuffix(c.Exposure.PathPrefix, "/") }

func (e ExposureConfig) validate(v validator, key string) {
	if !e.Enabled {
		return
	}
	if e.Gateway.Name == "" {
		v.add(key+".gateway.name", "is required with exposure on: name the site's Gateway the route attaches to")
	} else {
		v.dns1123Subdomain(key+".gateway.name", e.Gateway.Name)
	}
	if e.Gateway.Namespace == "" {
		v.add(key+".gateway.namespace", "is required with exposure on: the namespace of the site's Gateway")
	} else {
		v.dns1123Label(key+".gateway.namespace", e.Gateway.Namespace)
	}
	if e.Gateway.SectionName != "" {
		v.dns1123Subdomain(key+".gateway.sectionName", e.Gateway.SectionName)
	}
	switch {
	case e.Hostname == "":
		v.add(key+".hostname", "is required with exposure on: the name clients reach the model at, which the Gateway's listener accepts")
	case strings.HasPrefix(e.Hostname, "*"):
		v.add(key+".hostname", "%q is a wildcard: a stack routes one hostname of its own, so that it takes no other stack's", e.Hostname)
	default:
		v.errs(key+".hostname", e.Hostname, "hostname", validation.IsDNS1123Subdomain(e.Hostname))
	}
	if !pathPrefixPattern.MatchString(e.PathPrefix) {
		v.add(key+".pathPrefix", "%q is not a path prefix such as / or /m3/: segments of letters, digits and . _ ~ - (none starting with a dot), separated by /", e.PathPrefix)
	}
	v.choice(key+".scheme", reflect.TypeFor[ExposureConfig](), "scheme", e.Scheme)
	if e.Scheme == "https" && e.Gateway.SectionName == "" {
		v.add(key+".gateway.sectionName", "is required with scheme https: name the Gateway's TLS listener, or the route attaches to its plain-HTTP listeners too")
	}
	if !gatewayDurationPattern.MatchString(e.RequestTimeout) {
		v.add(key+".requestTimeout", "%q is not a Gateway API duration such as 2h, 30m or 0s (none)", e.RequestTimeout)
	}
	v.choice(key+".backend", reflect.TypeFor[ExposureConfig](), "backend", e.Backend)
	if e.Backend == BackendInferencePool {
		if e.EndpointPicker.Image == "" {
			v.add(key+".endpointPicker.image", "is required with backend %s: the image of Dynamo's endpoint picker (EPP) of the operator's release, as the site builds or mirrors it", BackendInferencePool)
		} else {
			v.image(key+".endpointPicker.image", e.EndpointPicker.Image)
		}
		e.EndpointPicker.Resources.validate(v, key+".endpointPicker.resources")
		e.FrontendSidecar.Resources.validate(v, key+".frontendSidecar.resources")
	}
}

// pathPrefixPattern is a path prefix the route can match and rewrite safely: no empty, "." or ".."
// segment, nothing to escape.
var pathPrefixPattern = regexp.MustCompile(`^(/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/?$`)

// gatewayDurationPattern is Gateway API's Duration (GEP-2257).
var gatewayDurationPattern = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)
