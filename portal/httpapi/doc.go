// Package httpapi serves a portal.Manager over HTTP: JSON for the operations, server-sent events for
// their progress, and one small page (page.html.tmpl, embedded).
//
//	srv, err := httpapi.NewServer(ctx, m, token) // token: the bearer token every request carries
//	srv.BasePath = "/portal"                      // optional, behind a reverse proxy
//	http.ListenAndServe(addr, srv.Handler())
//
// Every request needs the bearer token; the page takes it once in its sign-in form (POST /login,
// never in a URL: a ?token= is refused) and then holds a session cookie (never the token; Secure
// over TLS or behind a proxy that says so). State-changing requests from another origin are refused before
// authentication. Operations run in the background: a POST answers 202 once the operation holds
// the stack, 400 with the problems by key for an invalid request, 409 when the stack is busy; the
// operation's events stream from GET /api/stacks/{stack}/events. docs/portal.md describes the API
// as its callers see it.
//
// Files by concern: server.go (the server, its limits and routes), auth.go (token and sessions),
// operations.go (request bodies and the operations), events.go (each operation's kept log and the
// event stream), stacks.go (the reads), errors.go (error responses), page.go (the page).
//
// It imports package portal; portal never imports it.
package httpapi
