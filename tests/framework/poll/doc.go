// Package poll is the tests' one wait helper: Until polls a condition that returns an error instead
// of failing the test, so a transient error neither fails a test from another goroutine nor leaves
// it waiting out its timeout, and the test goroutine alone decides with require.NoError. It runs on
// k8s.io/apimachinery's wait.PollUntilContextTimeout.
package poll
