package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"minimax-m3/portal/httpapi"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"minimax-m3/config"
	"minimax-m3/portal"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "portal:", err)
		os.Exit(1)
	}
}

func run() error {
	var addr, projectDir, stateDir, backend, secretsProvider, tlsCert, tlsKey string
	var insecureHTTP, impersonate bool
	var drain time.Duration
	var maxStreams, maxEvents, maxOperations, maxStacks int
	var basePath, contexts, registries, priorityClasses, usersFile, auditFile, identityHeader, trustedProxies string
	flag.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	flag.StringVar(&tlsCert, "tls-cert", "", "serve TLS with this certificate (PEM; with -tls-key)")
	flag.StringVar(&tlsKey, "tls-key", "", "the certificate's private key (PEM)")
	flag.BoolVar(&impersonate, "impersonate", false, "act at the Kubernetes API server as each request's user and groups (the users file's groups), through the kubeconfig's impersonation: the API server's RBAC decides what a team may write and its audit log names the user")
	flag.BoolVar(&insecureHTTP, "insecure-http", false, "serve plain HTTP on a non-loopback address (behind a TLS-terminating proxy only)")
	flag.DurationVar(&drain, "drain", 2*time.Minute, "on SIGTERM, how long to wait for cancelled operations to clean up")
	flag.StringVar(&projectDir, "project-dir", ".", "the directory holding Pulumi.yaml and the base stack files")
	flag.StringVar(&stateDir, "state-dir", "", "the portal's durable directory: stack workspaces, plans, and the default backend (required)")
	flag.StringVar(&backend, "backend", "", "Pulumi backend URL (default: file://<state-dir>/state)")
	flag.StringVar(&secretsProvider, "secrets-provider", "", "secrets provider of new stacks: passphrase (default), awskms://…, gcpkms://…, hashivault://…")
	flag.IntVar(&maxStreams, "max-streams", httpapi.DefaultMaxStreams, "event streams served at once (one more gets 429)")
	flag.IntVar(&maxEvents, "max-events", httpapi.DefaultMaxEvents, "events kept per operation for the page and late streams (the oldest go first)")
	flag.IntVar(&maxOperations, "max-operations", portal.DefaultMaxOperations, "operations run at once over all stacks (one more gets 429)")
	flag.IntVar(&maxStacks, "max-stacks", portal.DefaultMaxStacks, "stacks the portal holds (an operation creating one more gets 429)")
	flag.StringVar(&registries, "image-registries", "", "registries (or repository prefixes) every request's images must come from, comma-separated (default: the recipe's, "+strings.Join(config.DefaultImageRegistries, ",")+")")
	flag.StringVar(&priorityClasses, "priority-classes", "", "priority classes a request's pods may name, comma-separated (default: none)")
	flag.StringVar(&basePath, "base-path", "", "serve under this path prefix, for a reverse proxy forwarding it unchanged (/portal: the page at /portal/)")
	flag.StringVar(&contexts, "contexts", "", "kubeconfig contexts a request may name in kubernetes.context, comma-separated (default: none; every stack uses the current context)")
	flag.StringVar(&usersFile, "users", "", "a YAML file of users, each with their token's SHA-256, their stacks and their namespaces (default: one user, admin, with MINIMAX_M3_PORTAL_TOKEN, reaching everything)")
	flag.StringVar(&auditFile, "audit-log", "", "append one JSON line per change, refusal and operation's end to this file (default: <state-dir>/audit.log)")
	flag.StringVar(&identityHeader, "identity-header", "", "take the user's name from this header of requests from -trusted-proxies (an authenticating proxy: X-Forwarded-Email); needs -users")
	flag.StringVar(&trustedProxies, "trusted-proxies", "", "addresses or CIDRs of the authenticating proxy, comma-separated (with -identity-header)")
	flag.Parse()
	if err := httpapi.CheckBasePath(basePath); err != nil {
		return fmt.Errorf("-base-path: %w", err)
	}
	if stateDir == "" {
		flag.Usage()
		return errors.New("-state-dir is required")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	if (tlsCert == "") != (tlsKey == "") {
		return errors.New("-tls-cert and -tls-key go together")
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	token := os.Getenv("MINIMAX_M3_PORTAL_TOKEN")
	// The Pulumi CLI and the provider run as children: they never need the portal's token.
	_ = os.Unsetenv("MINIMAX_M3_PORTAL_TOKEN")
	var users *httpapi.Users
	switch {
	case usersFile != "" && token != "":
		return errors.New("give -users or MINIMAX_M3_PORTAL_TOKEN, not both: with -users every user signs in with a token of their own")
	case usersFile != "":
		if users, err = httpapi.LoadUsers(usersFile); err != nil {
			return fmt.Errorf("-users: %w", err)
		}
	case token == "":
		if !loopback {
			return fmt.Errorf("refusing to listen on %s without MINIMAX_M3_PORTAL_TOKEN", addr)
		}
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		token = hex.EncodeToString(b)
		fmt.Fprintf(os.Stderr, "no MINIMAX_M3_PORTAL_TOKEN: sign in at http://%s%s/login with this run's random token: %s\n", addr, basePath, token)
	}
	if users == nil {
		if users, err = httpapi.SingleUser("admin", token); err != nil {
			return err
		}
	}
	proxy, err := proxyIdentity(identityHeader, trustedProxies, usersFile != "")
	if err != nil {
		return err
	}
	if !loopback && tlsCert == "" && !insecureHTTP {
		return fmt.Errorf("refusing to serve plain HTTP on %s: the token crosses the network; give -tls-cert and -tls-key, or -insecure-http behind a TLS proxy", addr)
	}
	m, err := portal.New(portal.Options{ProjectDir: projectDir, StateDir: stateDir, BackendURL: backend, SecretsProvider: secretsProvider,
		Contexts: splitList(contexts), MaxOperations: maxOperations, MaxStacks: maxStacks, ImageRegistries: splitList(registries), PriorityClasses: splitList(priorityClasses), Impersonate: impersonate})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if auditFile == "" {
		auditFile = filepath.Join(stateDir, "audit.log")
	}
	audit, err := os.OpenFile(auditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("-audit-log: %w", err)
	}
	defer func() { _ = audit.Close() }()
	srv := httpapi.NewServerForUsers(ctx, m, users)
	srv.AuditLog = audit
	srv.Proxy = proxy
	srv.MaxStreams, srv.MaxEvents, srv.BasePath = maxStreams, maxEvents, basePath
	// Plain HTTP beyond loopback is only ever served behind a TLS-terminating proxy.
	srv.SecureCookies = insecureHTTP
	// What an earlier run left behind (killed mid-update): shown on the page, cleared on request.
	ins, err := m.Interruptions(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checking the stacks for interrupted operations:", err)
	}
	for _, in := range ins {
		fmt.Fprintf(os.Stderr, "stack %s was interrupted: %d lock(s), %d pending operation(s); POST /api/stacks/%s/recover clears them\n",
			in.Stack, len(in.Locks), len(in.Pending), in.Stack)
	}
	srv.SetInterruptions(ins)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// Read limits for every request; write deadlines per handler (the event stream has none).
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	scheme := "http"
	if tlsCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(os.Stderr, "serving on %s://%s\n", scheme, ln.Addr())
	go func() {
		if tlsCert != "" {
			served <- hs.ServeTLS(ln, tlsCert, tlsKey)
		} else {
			served <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// SIGTERM: no new requests; the operations were cancelled with ctx (the CLI interrupted as
	// Ctrl-C does); wait for each to clear what it left pending, within -drain.
	fmt.Fprintln(os.Stderr, "stopping: cancelling the running operations")
	shutdown, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	_ = hs.Shutdown(shutdown)
	if err := m.Wait(shutdown); err != nil {
		return fmt.Errorf("operations still running after -drain %s: %s", drain, strings.Join(m.RunningStacks(), ", "))
	}
	// Their ends, on record before the audit log closes.
	if err := srv.Wait(shutdown); err != nil {
		return fmt.Errorf("operations' ends not yet recorded after -drain %s", drain)
	}
	fmt.Fprintln(os.Stderr, "stopped")
	return nil
}

// proxyIdentity is the authenticating proxy the flags describe, or nil.
func proxyIdentity(header, from string, haveUsers bool) (*httpapi.ProxyIdentity, error) {
	if header == "" && from == "" {
		return nil, nil
	}
	switch {
	case header == "" || from == "":
		return nil, errors.New("-identity-header and -trusted-proxies go together")
	case !haveUsers:
		return nil, errors.New("-identity-header needs -users: the header names a user of the file, who has its grants")
	case !headerName.MatchString(header):
		return nil, fmt.Errorf("-identity-header %q is not a header name (letters, digits, -)", header)
	}
	proxies, err := httpapi.ParseTrustedProxies(splitList(from))
	if err != nil {
		return nil, fmt.Errorf("-trusted-proxies: %w", err)
	}
	return &httpapi.ProxyIdentity{Header: header, From: proxies}, nil
}

var headerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)

// splitList is a comma-separated flag's values, empty ones dropped.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
