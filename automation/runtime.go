package automation

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"minimax-m3/components"
)

// The Automation API runs an inline program in a language runtime of its own, which answers the
// engine with the program's error as it is: the engine then shows it once more, prefixed "an
// unhandled error occurred: waiting for RPCs:", after the graph's wait has shown it on the
// resource it is about. The CLI's Go language host instead tells the engine to show nothing more
// (a bail) when the program exits as having shown its error, which components.Run does.
//
// inlineCommand gives the inline program that bail: it runs each operation's program in the
// language runtime below instead of the Automation API's, by handing the CLI its address in the
// --client flag the API sets (the CLI's documented way to attach a running language runtime).
type inlineCommand struct {
	auto.PulumiCommand
	program pulumi.RunFunc
}

// Run runs the CLI with the program served by a language runtime of the operation's own.
func (c inlineCommand) Run(ctx context.Context, workdir string, stdin io.Reader, additionalOutput, additionalErrorOutput []io.Writer,
	additionalEnv []string, args ...string) (string, string, int, error) {
	at := -1
	for i, a := range args {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "--client=") {
			at = i
		}
	}
	if at < 0 {
		return c.PulumiCommand.Run(ctx, workdir, stdin, additionalOutput, additionalErrorOutput, additionalEnv, args...)
	}
	addr, stop, err := serveProgram(c.program)
	if err != nil {
		return "", "", -2, fmt.Errorf("serving the program to the engine: %w", err)
	}
	defer stop()
	args = append([]string(nil), args...)
	args[at] = "--client=" + addr
	return c.PulumiCommand.Run(ctx, workdir, stdin, additionalOutput, additionalErrorOutput, additionalEnv, args...)
}

// languageRuntime serves one program to the engine, as the Automation API's does, with the
// program's errors shown once (components.ShowErrors) and a bail for an error already shown.
type languageRuntime struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	program pulumi.RunFunc
}

// serveProgram starts a language runtime for program on a local port: its address, and a function
// that stops it.
func serveProgram(program pulumi.RunFunc) (string, func(), error) {
	cancel := make(chan bool)
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: cancel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, &languageRuntime{program: program})
			return nil
		},
	})
	if err != nil {
		return "", nil, err
	}
	stop := func() {
		close(cancel)
		for range handle.Done { // until it has stopped (an error it sends says only how)
		}
	}
	return fmt.Sprintf("127.0.0.1:%d", handle.Port), stop, nil
}

// Run runs the program once, for a preview or an update.
func (r *languageRuntime) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	var engine string
	if len(req.GetArgs()) > 0 {
		engine = req.GetArgs()[0]
	}
	pctx, err := pulumi.NewContext(ctx, pulumi.RunInfo{
		EngineAddr:       engine,
		MonitorAddr:      req.GetMonitorAddress(),
		Config:           req.GetConfig(),
		ConfigSecretKeys: req.GetConfigSecretKeys(),
		Project:          req.GetProject(),
		Stack:            req.GetStack(),
		Parallel:         req.GetParallel(),
		DryRun:           req.GetDryRun(),
		Organization:     req.GetOrganization(),
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = pctx.Close() }()
	err = func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("the program panicked: %v", p)
			}
		}()
		return pulumi.RunWithContext(pctx, components.ShowErrors(r.program))
	}()
	switch {
	case err == nil:
		return &pulumirpc.RunResponse{}, nil
	case components.Shown(err):
		return &pulumirpc.RunResponse{Bail: true}, nil
	default:
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
}

// GetRequiredPlugins is empty: the engine finds the provider the program registers, as for the
// Automation API's inline programs.
func (r *languageRuntime) GetRequiredPlugins(context.Context, *pulumirpc.GetRequiredPluginsRequest) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

// GetPluginInfo is the runtime's version.
func (r *languageRuntime) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: "1.0.0"}, nil
}

// InstallDependencies has nothing to install: the program is compiled into this process.
func (r *languageRuntime) InstallDependencies(*pulumirpc.InstallDependenciesRequest, pulumirpc.LanguageRuntime_InstallDependenciesServer) error {
	return nil
}
