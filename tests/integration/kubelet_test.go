package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	remotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// playedKubelet is the part of a kubelet the API server talks to for `kubectl exec`: a Node whose
// kubelet endpoint is an HTTPS server here, answering /exec/<namespace>/<pod>/<container> with the
// kubelet's own streaming library (k8s.io/cri-streaming). The command runs on this machine through
// run, which maps the container's mounts. Exec requests then take the real path: client-go's
// WebSocket or SPDY executor, the API server's exec subresource (and its WebSocket-to-SPDY
// translation), the kubelet protocol.
type playedKubelet struct {
	Node string
	run  func(ctx context.Context, pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error
}

// startKubelet registers the Node and serves its kubelet endpoint until the test ends.
func startKubelet(t *testing.T, kube kubernetes.Interface, node string,
	run func(ctx context.Context, pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error) *playedKubelet {
	t.Helper()
	k := &playedKubelet{Node: node, run: run}
	srv := httptest.NewTLSServer(http.HandlerFunc(k.serveExec))
	t.Cleanup(srv.Close)
	_, portText, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)

	ctx := context.Background()
	n, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	return k
}

// serveExec is the kubelet's /exec/{namespace}/{pod}/{container}?command=…&input=1&output=1&error=1.
func (k *playedKubelet) serveExec(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "exec" {
		http.NotFound(w, req)
		return
	}
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeExec(w, req, executor(k.run), parts[2], "", parts[3], req.URL.Query()["command"], opts,
		time.Minute, 30*time.Second, remotecommand.SupportedStreamingProtocols)
}

type executor func(ctx context.Context, pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error

func (e executor) ExecInContainer(ctx context.Context, pod, _, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	stdout, stderr := io.Discard, io.Discard
	if out != nil {
		stdout = out
	}
	if errw != nil {
		stderr = errw
	}
	err := e(ctx, pod, container, cmd, in, stdout, stderr)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		// The exit code, as a container runtime reports it.
		return utilexec.CodeExitError{Err: err, Code: exit.ExitCode()}
	}
	return err
}

// bind plays the scheduler: the pod goes to the played kubelet's Node.
func (k *playedKubelet) bind(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) error {
	return kube.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.Node},
	}, metav1.CreateOptions{})
}
