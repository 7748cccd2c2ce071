package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

func newBackupCmd(env cliEnv) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "backup --output FILE",
		Short: "copy a running node's raft.db (GET /backup) into FILE",
		Long: `backup asks a running node for a consistent copy of its data file and
writes it to FILE (a new file: it refuses to overwrite one). The copy is
checked against its announced length and fsynced before FILE appears.
To restore a node that lost its data directory, take the copy from a peer
after the loss and place it as DATA_DIR/raft.db (docs/operations.md).`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "file to write (required)")
	client := addAdminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if output == "" {
			return errors.New("--output: required")
		}
		n, err := client().backup(cmd, output)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "wrote %d bytes to %s\n", n, output)
		return nil
	}
	return cmd
}

// backup streams GET /backup into path through a temporary file in the
// same directory, so that path only ever holds a whole, synced copy.
func (c *adminClient) backup(cmd *cobra.Command, path string) (int64, error) {
	if _, err := os.Lstat(path); err == nil {
		return 0, fmt.Errorf("--output: %s exists; not overwriting it", path)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, c.base+"/backup", nil)
	if err != nil {
		return 0, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// No client timeout: a large copy takes as long as it takes.
	resp, err := (&http.Client{Transport: c.http.Transport}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("admin API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return 0, errorFromResponse(resp.StatusCode, data)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".partial-*")
	if err != nil {
		return 0, fmt.Errorf("--output: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	n, err := io.Copy(tmp, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("got %d of %d bytes", n, resp.ContentLength)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("backup from %s cut short: %w", c.base, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return n, fmt.Errorf("--output: %w", err)
	}
	return n, nil
}
