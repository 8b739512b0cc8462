// Command pullrequest is what the PR check asks of GitHub (package pullrequest), built from the
// pull request's base:
//
//	pullrequest consent -pr 12 -author alice [-reset]   # prints "all" or nothing (why on stderr)
//	pullrequest comment -pr 12 -stack agg -title T -section preview=f -section policies=g
//	pullrequest stack-file -file Pulumi.agg.yaml         # fails when it holds the token
//
// It reads GITHUB_REPOSITORY, GITHUB_API_URL (default https://api.github.com) and GH_TOKEN.
package main
