// Command portal serves the minimax-m3 stacks over HTTP for a platform portal: JSON operations,
// server-sent progress events and a small live page (package portal).
//
//	MINIMAX_M3_PORTAL_TOKEN=<token> PULUMI_CONFIG_PASSPHRASE=… go run ./cmd/portal -state-dir /var/lib/minimax-m3-portal
//
// It binds to 127.0.0.1:8080 unless -addr says otherwise. Every request needs the bearer token from
// MINIMAX_M3_PORTAL_TOKEN; on a loopback address without one it makes a random token and prints
// the page's address with it, on any other address it refuses to start.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"minimax-m3/portal"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "portal:", err)
		os.Exit(1)
	}
}

func run() error {
	var addr, projectDir, stateDir, backend, secretsProvider string
	flag.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	flag.StringVar(&projectDir, "project-dir", ".", "the directory holding Pulumi.yaml and the base stack files")
	flag.StringVar(&stateDir, "state-dir", "", "the portal's durable directory: stack workspaces, plans, and the default backend (required)")
	flag.StringVar(&backend, "backend", "", "Pulumi backend URL (default: file://<state-dir>/state)")
	flag.StringVar(&secretsProvider, "secrets-provider", "", "secrets provider of new stacks: passphrase (default), awskms://…, gcpkms://…, hashivault://…")
	flag.Parse()
	if stateDir == "" {
		flag.Usage()
		return errors.New("-state-dir is required")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	token := os.Getenv("MINIMAX_M3_PORTAL_TOKEN")
	// The Pulumi CLI and the provider run as children: they never need the portal's token.
	_ = os.Unsetenv("MINIMAX_M3_PORTAL_TOKEN")
	if token == "" {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("refusing to listen on %s without MINIMAX_M3_PORTAL_TOKEN", addr)
		}
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		token = hex.EncodeToString(b)
		fmt.Fprintf(os.Stderr, "no MINIMAX_M3_PORTAL_TOKEN: using a random token for this run; page: http://%s/?token=%s\n", addr, token)
	}
	m, err := portal.New(portal.Options{ProjectDir: projectDir, StateDir: stateDir, BackendURL: backend, SecretsProvider: secretsProvider})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := portal.NewServer(ctx, m, token)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdown)
	}()
	fmt.Fprintf(os.Stderr, "serving on http://%s\n", ln.Addr())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
