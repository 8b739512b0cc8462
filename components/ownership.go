package components

import (
	"context"

	"minimax-m3/internal/cluster"
	"minimax-m3/preflight"
)

// ObjectReader reads a live object's metadata (cluster.Reader does): the pre-deploy checks' reader
// of the cluster (package preflight), which may also list the pool, the routes and the Gateway.
type ObjectReader = preflight.ObjectReader

// LiveObject is what the checks need of a live object: its labels and annotations.
type LiveObject = cluster.LiveObject

// JobResultReader reads what a Job's pod said when it ended: the termination message of the named
// container ("" when there is none).
type JobResultReader interface {
	JobResult(ctx context.Context, namespace, job, container string) (string, error)
}
