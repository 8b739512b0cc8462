package rackbox

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	remotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ExecFunc runs a command in a container of a running pod, the way a container runtime would for
// the kubelet. An *exec.ExitError it returns is the command's exit code (128 plus the signal's
// number when a signal ended it). ctx ends when the box stops; as with a container runtime, a
// client that goes away does not stop the command: it shows as a failed write or the end of stdin.
type ExecFunc func(ctx context.Context, pod *corev1.Pod, container string, command []string, stdin io.Reader, stdout, stderr io.Writer) error

// kubelet is the part of every box node's kubelet the API server talks to for `kubectl exec`:
// the nodes' kubelet endpoint (127.0.0.1, the port kwok writes into each node's daemonEndpoints)
// is an HTTPS server here answering /exec/<namespace>/<pod>/<container> with the kubelet's own
// streaming library (k8s.io/cri-streaming). Exec requests take the real path: client-go's
// WebSocket or SPDY executor, the API server's exec subresource (with its WebSocket-to-SPDY
// translation), the kubelet protocol over TLS both ways (kubeletPKI). No container runs in the
// box, so a test says what a command does in the namespace it owns (HandleExec); without a
// handler the exec fails with an error that says so.
type kubelet struct {
	srv  *http.Server
	port int
	pods client.Reader
	pki  *kubeletPKI
	// serving is the certificate the endpoint presents (a test may swap it: export_test.go).
	serving atomic.Pointer[tls.Certificate]
	// ctx ends every exec when the box stops; running counts them.
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup

	mu       sync.Mutex
	handlers map[string]*execHandler
	stopped  bool
	// conns are the running execs' connections, for stop to close: the streaming library
	// hijacks them from the server, which then no longer closes them itself.
	conns map[net.Conn]struct{}
}

// connKey is the request context's key for its connection (http.Server.ConnContext).
type connKey struct{}

type execHandler struct{ run ExecFunc }

func startKubelet(pods client.Reader, pki *kubeletPKI) (*kubelet, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &kubelet{pods: pods, pki: pki, handlers: map[string]*execHandler{}, conns: map[net.Conn]struct{}{}, port: ln.Addr().(*net.TCPAddr).Port}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.serving.Store(&pki.serving)
	k.srv = &http.Server{
		Handler: http.HandlerFunc(k.serveExec),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return k.serving.Load(), nil
			},
			// Only the API server, with its kubelet client certificate, may call.
			ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs:  pki.pool,
		},
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		// A refused handshake is the client's error to report; anything else (a handler's panic)
		// goes to stderr.
		ErrorLog: log.New(skipHandshakeErrors{os.Stderr}, "rackbox kubelet: ", 0),
	}
	go func() { _ = k.srv.ServeTLS(ln, "", "") }()
	return k, nil
}

// stop closes the endpoint and the exec streams, ends the execs it runs and waits for them.
func (k *kubelet) stop() {
	k.mu.Lock()
	k.stopped = true
	conns := k.conns
	k.conns = map[net.Conn]struct{}{}
	k.mu.Unlock()
	_ = k.srv.Close()
	for c := range conns {
		_ = c.Close()
	}
	k.cancel()
	k.running.Wait()
}

// begin counts an exec and keeps its connection, unless the endpoint is stopping.
func (k *kubelet) begin(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return false
	}
	k.running.Add(1)
	k.conns[c] = struct{}{}
	return true
}

// end forgets an exec that ended (the streaming library has closed its connection).
func (k *kubelet) end(c net.Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
	k.running.Done()
}

// skipHandshakeErrors drops the server's log lines about refused TLS handshakes.
type skipHandshakeErrors struct{ w io.Writer }

func (s skipHandshakeErrors) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) {
		return len(p), nil
	}
	return s.w.Write(p)
}

// HandleExec runs fn for every exec into a pod of namespace until the returned func is called (it
// removes fn only: a later HandleExec for the namespace replaces fn, and keeps its handler when
// fn's is removed).
func (b *Box) HandleExec(namespace string, fn ExecFunc) (remove func()) {
	h := &execHandler{run: fn}
	k := b.kubelet
	k.mu.Lock()
	defer k.mu.Unlock()
	k.handlers[namespace] = h
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.handlers[namespace] == h {
			delete(k.handlers, namespace)
		}
	}
}

// serveExec is the kubelet's /exec/{namespace}/{pod}/{container}?command=…&input=1&output=1&error=1.
func (k *kubelet) serveExec(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "exec" {
		http.NotFound(w, req)
		return
	}
	conn, _ := req.Context().Value(connKey{}).(net.Conn)
	if !k.begin(conn) {
		http.Error(w, "the box is stopping", http.StatusServiceUnavailable)
		return
	}
	defer k.end(conn)
	ns, name, container := parts[1], parts[2], parts[3]
	// The kubelet execs only into a container it runs.
	pod := &corev1.Pod{}
	if err := k.pods.Get(req.Context(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		status := http.StatusInternalServerError // the kubelet could not read it: not the same as no such pod
		if apierrors.IsNotFound(err) {
			status = http.StatusNotFound
		}
		http.Error(w, err.Error(), status)
		return
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodRunning || !hasContainer(pod, container) {
		http.Error(w, fmt.Sprintf("container %q of pod %s/%s is not running (phase %s, node %q)", container, ns, name, pod.Status.Phase, pod.Spec.NodeName), http.StatusBadRequest)
		return
	}
	k.mu.Lock()
	h := k.handlers[ns]
	k.mu.Unlock()
	run := func(_ context.Context, _ *corev1.Pod, _ string, command []string, _ io.Reader, _, _ io.Writer) error {
		return fmt.Errorf("exec %q: no container runtime in the box, and no test handles exec in namespace %s", command, ns)
	}
	if h != nil {
		run = h.run
	}
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The kubelet's defaults: streamingConnectionIdleTimeout 4h, 30 s to create the streams.
	remotecommand.ServeExec(w, req, containerRuntime{box: k.ctx, pod: pod, run: run}, name, string(pod.UID), container, req.URL.Query()["command"], opts,
		4*time.Hour, 30*time.Second, remotecommand.SupportedStreamingProtocols)
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// containerRuntime is the container runtime the streaming library calls.
type containerRuntime struct {
	box context.Context
	pod *corev1.Pod
	run ExecFunc
}

func (r containerRuntime) ExecInContainer(ctx context.Context, _, _ string, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.box, cancel)()
	stdout, stderr := io.Discard, io.Discard
	if out != nil {
		stdout = out
	}
	if errw != nil {
		stderr = errw
	}
	err := r.run(ctx, r.pod, container, cmd, in, stdout, stderr)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		// The exit code, as a container runtime reports it: 128+n for a command that signal n ended.
		code := exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}
