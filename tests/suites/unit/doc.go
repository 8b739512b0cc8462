// Package unit tests the program with the Pulumi engine mocked: every resource the program
// registers is recorded with its inputs, and the tests assert on those.
package unit
