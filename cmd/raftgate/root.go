package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/internal/buildinfo"
)

// cliEnv is the process environment the commands use, injected so that
// tests run commands in-process.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// lookupEnv reads RAFTGATE_* variables (os.LookupEnv in main).
	lookupEnv func(string) (string, bool)
	// environ lists the environment as KEY=value (os.Environ in main), to
	// find RAFTGATE_* variables that name no flag; nil checks none.
	environ func() []string
}

// serverRunner runs one node until ctx is done: runServer in production,
// a stand-in in tests.
type serverRunner func(ctx context.Context, cfg ServerConfig, logger zerolog.Logger) error

// errSilent marks an error whose explanation the command already printed.
var errSilent = errors.New("failed")

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, env cliEnv, runNode serverRunner) int {
	root := newRootCmd(env, runNode)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errSilent) {
			fmt.Fprintf(env.stderr, "raftgate: %v\n", err)
		}
		return 1
	}
	return 0
}

func newRootCmd(env cliEnv, runNode serverRunner) *cobra.Command {
	root := &cobra.Command{
		Use:   "raftgate",
		Short: "raftgate: durable invocations of HTTP services, replicated with Raft",
		Long: `raftgate records every invocation in a Raft log before acknowledging it,
runs it against the service's HTTP endpoint, and keeps the result for any
caller to fetch. Every flag can also be set as RAFTGATE_<FLAG> (upper case,
dashes as underscores); flags win over the environment.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Environment variables fill every flag the command line left unset.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return applyEnv(cmd.Flags(), env.lookupEnv)
		},
	}
	// --version prints what `raftgate version` prints.
	root.Version = buildinfo.Read().Version
	root.SetVersionTemplate(versionText(buildinfo.Read()))
	root.SetIn(env.stdin)
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	})
	root.AddCommand(
		newServerCmd(env, runNode),
		newDevCmd(env, runNode),
		newStatusCmd(env),
		newBackupCmd(env),
		newServicesCmd(env),
		newInvocationsCmd(env),
		newNodesCmd(env),
		newPlacementCmd(env),
		newSchedulesCmd(env),
		newRulesCmd(env),
		newInvokeCmd(env),
		newBenchCmd(env),
		newEchoCmd(env),
		newVersionCmd(env),
	)
	return root
}
