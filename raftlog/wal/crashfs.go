package wal

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// ErrCrashed is returned by every operation of a CrashFS after Crash, and
// by the files it opened.
var ErrCrashed = errors.New("wal: file system crashed (CrashFS)")

// CrashFS is a testing file layer that simulates a power cut. It passes
// everything through to the real files but remembers, per file, the writes
// (and truncations) not yet covered by a completed Sync, and the creations,
// renames and removals not yet covered by a SyncDir of their directory.
// Crash throws all of that away: every file gets back the bytes it had at
// its last Sync, and unsynced directory changes are undone, as after a
// power loss that kept nothing unsynced. Sync itself is simulated (no real
// fdatasync), which keeps crash tests fast.
//
// After Crash the CrashFS and every file it opened return ErrCrashed, so a
// WAL on it is unusable; open the directory again with a new CrashFS (or
// OSFS) to see what survived. Files that existed before the CrashFS first
// saw them count as synced; directories it creates count as durable.
type CrashFS struct {
	mu      sync.Mutex
	crashed bool
	files   map[string]*crashFile // by current path
	pending []dirChange           // not yet covered by SyncDir
}

// crashFile is what CrashFS remembers of one file.
type crashFile struct {
	path       string
	syncedSize int64
	undo       []undoWrite // since the last Sync, oldest first
}

// undoWrite holds the bytes a write or truncation overwrote.
type undoWrite struct {
	off int64
	old []byte
}

type dirChange struct {
	dir      string
	created  string // path of a new file
	from, to string // a rename
	removed  string // path of a removed file
	// content is the synced content of the file a rename replaced or a
	// removal deleted (nil if none was replaced).
	content []byte
	had     bool
}

// NewCrashFS returns a CrashFS over the real file system.
func NewCrashFS() *CrashFS { return &CrashFS{files: make(map[string]*crashFile)} }

func (c *CrashFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = filepath.Clean(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return nil, ErrCrashed
	}
	info, statErr := os.Stat(name)
	existed := statErr == nil
	var truncated []byte
	if existed && flag&os.O_TRUNC != 0 {
		truncated, _ = c.syncedContent(name)
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	cf := c.files[name]
	if cf == nil {
		cf = &crashFile{path: name}
		if existed {
			cf.syncedSize = info.Size()
		} else {
			c.pending = append(c.pending, dirChange{dir: filepath.Dir(name), created: name})
		}
		c.files[name] = cf
	}
	if truncated != nil {
		cf.undo = append(cf.undo, undoWrite{off: 0, old: truncated})
	}
	return &crashHandle{fs: c, f: f, cf: cf}, nil
}

func (c *CrashFS) Rename(oldpath, newpath string) error {
	oldpath, newpath = filepath.Clean(oldpath), filepath.Clean(newpath)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return ErrCrashed
	}
	ch := dirChange{dir: filepath.Dir(newpath), from: oldpath, to: newpath}
	ch.content, ch.had = c.syncedContent(newpath)
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	delete(c.files, newpath)
	if cf := c.files[oldpath]; cf != nil {
		delete(c.files, oldpath)
		cf.path = newpath
		c.files[newpath] = cf
	}
	c.pending = append(c.pending, ch)
	return nil
}

func (c *CrashFS) Remove(name string) error {
	name = filepath.Clean(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return ErrCrashed
	}
	ch := dirChange{dir: filepath.Dir(name), removed: name}
	ch.content, ch.had = c.syncedContent(name)
	if err := os.Remove(name); err != nil {
		return err
	}
	delete(c.files, name)
	c.pending = append(c.pending, ch)
	return nil
}

// syncedContent returns the bytes the file at path had at its last sync.
func (c *CrashFS) syncedContent(path string) ([]byte, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	if cf := c.files[path]; cf != nil {
		for _, u := range slices.Backward(cf.undo) {
			if end := u.off + int64(len(u.old)); end > int64(len(data)) {
				data = append(data, make([]byte, end-int64(len(data)))...)
			}
			copy(data[u.off:], u.old)
		}
		if int64(len(data)) > cf.syncedSize {
			data = data[:cf.syncedSize]
		} else {
			data = append(data, make([]byte, cf.syncedSize-int64(len(data)))...)
		}
	}
	return data, true
}

func (c *CrashFS) ReadDir(dir string) ([]string, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return OSFS{}.ReadDir(dir)
}

func (c *CrashFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := c.check(); err != nil {
		return err
	}
	return os.MkdirAll(dir, perm)
}

func (c *CrashFS) SyncDir(dir string) error {
	dir = filepath.Clean(dir)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return ErrCrashed
	}
	c.pending = slices.DeleteFunc(c.pending, func(ch dirChange) bool { return ch.dir == dir })
	return nil
}

func (c *CrashFS) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return ErrCrashed
	}
	return nil
}

// Crash simulates a power cut: everything not synced is undone, and the
// CrashFS is dead from now on.
func (c *CrashFS) Crash() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return nil
	}
	c.crashed = true
	var errs []error
	for _, cf := range c.files {
		if len(cf.undo) == 0 {
			continue
		}
		data, _ := c.syncedContent(cf.path)
		errs = append(errs, os.WriteFile(cf.path, data, 0o600))
	}
	for _, ch := range slices.Backward(c.pending) {
		switch {
		case ch.created != "":
			errs = append(errs, os.Remove(ch.created))
		case ch.from != "":
			errs = append(errs, os.Rename(ch.to, ch.from))
			if ch.had {
				errs = append(errs, os.WriteFile(ch.to, ch.content, 0o600))
			}
		case ch.removed != "":
			errs = append(errs, os.WriteFile(ch.removed, ch.content, 0o600))
		}
	}
	c.files, c.pending = nil, nil
	return errors.Join(errs...)
}

// crashHandle is a file opened through a CrashFS.
type crashHandle struct {
	fs *CrashFS
	f  *os.File
	cf *crashFile
}

func (h *crashHandle) ReadAt(p []byte, off int64) (int, error) {
	if err := h.fs.check(); err != nil {
		return 0, err
	}
	return h.f.ReadAt(p, off)
}

func (h *crashHandle) WriteAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.fs.crashed {
		return 0, ErrCrashed
	}
	if err := h.saveOld(off, int64(len(p))); err != nil {
		return 0, err
	}
	return h.f.WriteAt(p, off)
}

// saveOld records the current bytes of [off, off+n) that exist.
func (h *crashHandle) saveOld(off, n int64) error {
	st, err := h.f.Stat()
	if err != nil {
		return err
	}
	n = min(n, st.Size()-off)
	if n <= 0 {
		h.cf.undo = append(h.cf.undo, undoWrite{off: off, old: []byte{}})
		return nil
	}
	old := make([]byte, n)
	if _, err := h.f.ReadAt(old, off); err != nil {
		return err
	}
	h.cf.undo = append(h.cf.undo, undoWrite{off: off, old: old})
	return nil
}

func (h *crashHandle) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.fs.crashed {
		return ErrCrashed
	}
	if err := h.saveOld(size, 1<<62); err != nil {
		return err
	}
	return h.f.Truncate(size)
}

// Sync marks the file's current content durable (no real fdatasync).
func (h *crashHandle) Sync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.fs.crashed {
		return ErrCrashed
	}
	st, err := h.f.Stat()
	if err != nil {
		return err
	}
	h.cf.undo = nil
	h.cf.syncedSize = st.Size()
	return nil
}

func (h *crashHandle) Size() (int64, error) {
	if err := h.fs.check(); err != nil {
		return 0, err
	}
	st, err := h.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (h *crashHandle) Close() error { return h.f.Close() }
