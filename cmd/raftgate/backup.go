package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"
)

func newBackupCmd(env cliEnv) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "backup --output FILE",
		Short: "copy a running node's data file (GET /backup) into FILE",
		Long: `backup asks a running node for a consistent copy of its bbolt data file and
writes it to FILE (a new file: it refuses to overwrite one). FILE's
directory must exist and be writable; that is checked before the node is
asked. The copy is checked before FILE appears: its length against the
announced one, bbolt's magic number, and that bbolt opens it read-only.
It is fsynced; a copy that fails a check leaves nothing behind.
To restore a node that lost its data directory, take the copy from a peer
after the loss and place it in the emptied data directory (docs/operations.md,
"Backup and restore").`,
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
		fmt.Fprintf(env.stdout, "wrote %d bytes to %s (a bbolt file that opens)\n", n, output)
		return nil
	}
	return cmd
}

// backup streams GET /backup into path through a temporary file in the
// same directory, so that path only ever holds a whole, synced, checked
// copy. The temporary file is created before the request: a directory that
// is missing or not writable fails before the node does any work.
func (c *adminClient) backup(cmd *cobra.Command, path string) (int64, error) {
	if _, err := os.Lstat(path); err == nil {
		return 0, fmt.Errorf("--output: %s exists; not overwriting it", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".partial-*")
	if err != nil {
		return 0, fmt.Errorf("--output: cannot write there: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	n, err := c.download(cmd, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	if err := checkBoltFile(tmp.Name(), n); err != nil {
		return n, fmt.Errorf("backup from %s is not a usable data file: %w", c.base, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return n, fmt.Errorf("--output: %w", err)
	}
	return n, nil
}

// download copies GET /backup into f and fsyncs it. An answer that does
// not announce its length is refused: the length is the only sign that a
// copy which ended was not cut short.
func (c *adminClient) download(cmd *cobra.Command, f *os.File) (int64, error) {
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
	if resp.ContentLength < 0 {
		return 0, fmt.Errorf("backup from %s: the answer has no Content-Length; is this a raftgate admin API?", c.base)
	}
	n, err := io.Copy(f, resp.Body)
	if err == nil && n != resp.ContentLength {
		err = fmt.Errorf("got %d of %d bytes", n, resp.ContentLength)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return n, fmt.Errorf("backup from %s cut short: %w", c.base, err)
	}
	return n, nil
}

// boltMagic opens every bbolt meta page; the first one starts after the
// 16-byte page header of page 0, in the machine's byte order (bbolt files
// are not portable across byte orders either).
const (
	boltMagic       = 0xED0CDAED
	boltMagicOffset = 16
)

// checkBoltFile checks that the n bytes at path are a bbolt database: the
// magic number first (for a clear message when a server answered something
// else), then that bbolt opens it read-only, which checks its meta pages.
func checkBoltFile(path string, n int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	head := make([]byte, boltMagicOffset+4)
	_, err = io.ReadFull(f, head)
	f.Close()
	if err != nil || binary.NativeEndian.Uint32(head[boltMagicOffset:]) != boltMagic {
		return fmt.Errorf("%d bytes without bbolt's magic number", n)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("bbolt cannot open it: %w", err)
	}
	return db.Close()
}
