// Package localstack runs stacks of a program checkout through the Pulumi CLI on the local API
// server: copies of a working tree or a commit, a file backend of their own, awaits off. It serves
// `make pr-check` and `make bench`.
package localstack
