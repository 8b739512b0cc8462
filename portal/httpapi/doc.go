// Package httpapi serves a portal.Manager over HTTP: JSON for the operations, server-sent events for
// their progress, and one small page (page.html.tmpl, embedded).
//
//	users, err := httpapi.LoadUsers("users.yaml") // each user's token hash, stacks and namespaces
//	srv := httpapi.NewServerForUsers(ctx, m, users) // or NewServer(ctx, m, token): one user reaching everything
//	srv.BasePath = "/portal"                        // optional, behind a reverse proxy
//	srv.AuditLog = file                             // optional: one JSON line per change, refusal and operation's end
//	srv.Proxy = &httpapi.ProxyIdentity{Header: "X-Forwarded-Email", From: proxies} // optional: the site's OIDC proxy names the user
//	http.ListenAndServe(addr, srv.Handler())
//
// Every request needs a user's bearer token; a user sees and acts on only the stacks granted to
// them, and deploys only into their namespaces (403 before anything runs). The page takes it once in its sign-in form (POST /login,
// never in a URL: a ?token= is refused) and then holds a session cookie (never the token; Secure
// over TLS or behind a proxy that says so). State-changing requests from another origin are refused before
// authentication. Operations run in the background: a POST answers 202 once the operation holds
// the stack, 400 with the problems by key for an invalid request, 409 when the stack is busy; the
// operation's events stream from GET /api/stacks/{stack}/events. docs/portal.md describes the API
// as its callers see it.
//
// Files by concern: server.go (the server, its limits and routes), auth.go (sign-in and sessions), users.go (users and their grants),
// audit.go (the audit log),
// operations.go (request bodies and the operations), events.go (each operation's kept log and the
// event stream), stacks.go (the reads), errors.go (error responses), page.go (the page).
//
// It imports package portal; portal never imports it.
package httpapi
