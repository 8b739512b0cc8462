// Command portal serves the minimax-m3 stacks over HTTP for a platform portal: JSON operations,
// server-sent progress events and a small live page (packages portal and portal/httpapi).
//
//	MINIMAX_M3_PORTAL_TOKEN=<token> PULUMI_CONFIG_PASSPHRASE=… go run ./cmd/portal -state-dir /var/lib/minimax-m3-portal
//
// It binds to 127.0.0.1:8080 unless -addr says otherwise. Every request needs a user's bearer token:
// with -users, each user's own (the file grants each their stacks and namespaces); otherwise the one
// token of MINIMAX_M3_PORTAL_TOKEN; on a loopback address without one it makes a random token and prints
// the page's address with it, on any other address it refuses to start. Beyond loopback it serves
// TLS (-tls-cert, -tls-key), or plain HTTP only with -insecure-http (behind a TLS proxy).
// -audit-log (default <state-dir>/audit.log) receives a JSON line per change, refusal and operation's
// end. SIGTERM stops taking requests, cancels the running operations and waits for them to clean up.
package main
