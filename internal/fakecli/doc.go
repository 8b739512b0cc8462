// Package fakecli puts a fake Pulumi CLI on PATH for a test: a shell script that logs its calls and
// answers each by its arguments. Tests use it where the real CLI leaves no way to hold a state
// still (a stack being created, a version check that fails). It is for tests only; the one fake
// the automation and portal packages' tests share.
package fakecli
