package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/internal/buildinfo"
)

// versionText is what `raftgate version` and `raftgate --version` print.
func versionText(b buildinfo.Info) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "raftgate %s\n", b.Version)
	fmt.Fprintf(&sb, "commit:     %s\n", dash(b.Commit))
	fmt.Fprintf(&sb, "build date: %s\n", dash(b.BuildDate))
	fmt.Fprintf(&sb, "go:         %s\n", b.GoVersion)
	return sb.String()
}

func newVersionCmd(env cliEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version, commit, build date and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := io.WriteString(env.stdout, versionText(buildinfo.Read()))
			return err
		},
	}
}
