// Package objwatch waits on one Kubernetes object by name, with client-go's watch tools.
package objwatch
