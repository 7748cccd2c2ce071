package wal

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Defaults for zero Options fields.
const (
	DefaultSegmentSize = 64 << 20
	DefaultCacheBytes  = 4 << 20
)

// maxSegmentSize keeps every offset in a segment within 32 bits, even with
// a maximal batch written into a fresh segment.
const (
	maxSegmentSize  = 1 << 30
	maxBatchPayload = 1 << 30
)

// Options configures Open. Zero fields take defaults.
type Options struct {
	// Dir is the log's directory (created if missing).
	Dir string
	// SegmentSize is the preallocated size of a segment file (default 64
	// MiB, at most 1 GiB); tests use small ones.
	SegmentSize int64
	// CacheBytes bounds the in-memory tail cache per group (default 4 MiB).
	CacheBytes int
	// FS is the file layer; nil means the OS.
	FS FS
	// Knobs are failpoints; nil in production.
	Knobs *Knobs
	// Logger receives the log's own events (torn tail repaired, segments).
	Logger zerolog.Logger
}

// Knobs are failpoints at the log's durability boundaries, each called on
// the goroutine of Write (each may be nil).
type Knobs struct {
	// BeforeWrite runs before a batch's write(2).
	BeforeWrite func()
	// AfterWrite runs after the write, before the fdatasync (also when
	// Write was not asked to sync).
	AfterWrite func()
	// AfterSync runs after the fdatasync, before Write returns (only when
	// Write synced).
	AfterSync func()
}

// Stats are counters for metrics.
type Stats struct {
	Segments      int    // live segment files (not counting the prepared next one)
	SegmentBytes  int64  // their size on disk
	Writes        uint64 // Write calls that wrote a batch
	BytesWritten  uint64 // bytes written by them
	Syncs         uint64 // fdatasyncs of segments
	SyncDuration  time.Duration
	CutOvers      uint64 // switches to a new segment
	Recycled      uint64 // old segments reused as new ones
	Removed       uint64 // old segments deleted
	TornTailBytes int64  // bytes dropped from the tail at Open
}

// WAL is the write-ahead log of one node: the Raft logs of all its groups
// in one stream of segment files. See doc.go for the format and the rules.
type WAL struct {
	dir      string
	fs       FS
	segSize  int64
	cacheLim int
	knobs    Knobs
	log      zerolog.Logger

	// Owned by the goroutine calling Write (and by Open before it returns).
	active    *segment
	off       int64 // where the next frame goes in active
	syncedOff int64 // active is durable up to here
	dirty     bool  // active has writes not covered by a sync
	needState bool  // active lacks its leading state frame
	// prevSeq and prevEnd name the segment before active and where its
	// records end, for active's state frame.
	prevSeq uint64
	prevEnd int64
	// recPrev and recPrevEnd are the segment recovered before the one
	// being recovered, and where its records end (Open only).
	recPrev    *segment
	recPrevEnd int64
	broken     error
	writeBuf   []byte
	stateBuf   []byte
	sim        map[uint32]simGroup

	// mu guards the groups' indexes and the segment list; Write holds it
	// only to validate and to publish a batch, never across I/O.
	mu       sync.RWMutex
	groups   map[uint32]*group
	segments []*segment // oldest first; the last is active
	retired  []*segment // released, waiting for the manager to delete or recycle

	// The segment manager goroutine prepares the next segment and deletes
	// or recycles retired ones.
	prepared   chan prepared // at most one prepared segment
	prepareReq chan uint64   // sequence number to prepare next
	wake       chan struct{} // retired segments are waiting
	stop       chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once

	stats struct {
		writes, bytesWritten, syncs, syncNanos atomic.Uint64
		cutOvers, recycled, removed            atomic.Uint64
		tornTail                               atomic.Int64
	}
}

// segment is one live segment file.
type segment struct {
	seq  uint64
	name string
	// mu keeps f open while a reader preads from it; f is nil once the
	// segment is retired.
	mu sync.RWMutex
	f  File

	// Guarded by WAL.mu.
	size     int64
	hasState bool // its leading state frame is durable
	// prevSeq and prevEnd are what its state frame says of the segment
	// before it (read at recovery only).
	prevSeq  uint64
	prevEnd  int64
	maxIndex map[uint32]uint64 // highest entry index of each group written here
}

func (s *segment) noteIndex(g uint32, i uint64) {
	if i > s.maxIndex[g] {
		s.maxIndex[g] = i
	}
}

// simGroup is a group's shape while a batch is validated.
type simGroup struct {
	base, last uint64
	lastOp     int // index of the group's latest op in the batch, -1 if none
}

// Open opens (or creates) the log in opts.Dir and recovers it: it reads
// every segment once, rebuilds each group's index, repairs a torn tail of
// the last segment (logged at warn: file, offset, bytes dropped) and
// refuses with a *CorruptError for damage anywhere else.
func Open(opts Options) (*WAL, error) {
	if opts.Dir == "" {
		return nil, errors.New("wal: Options.Dir is empty")
	}
	w := &WAL{
		dir:        opts.Dir,
		fs:         opts.FS,
		segSize:    opts.SegmentSize,
		cacheLim:   opts.CacheBytes,
		log:        opts.Logger.With().Str("component", "wal").Logger(),
		groups:     make(map[uint32]*group),
		sim:        make(map[uint32]simGroup),
		prepared:   make(chan prepared, 1),
		prepareReq: make(chan uint64, 1),
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
	}
	if w.fs == nil {
		w.fs = OSFS{}
	}
	if w.segSize == 0 {
		w.segSize = DefaultSegmentSize
	}
	if w.segSize < 4096 || w.segSize > maxSegmentSize {
		return nil, fmt.Errorf("wal: Options.SegmentSize %d out of range [4096, %d]", w.segSize, maxSegmentSize)
	}
	if w.cacheLim == 0 {
		w.cacheLim = DefaultCacheBytes
	}
	if opts.Knobs != nil {
		w.knobs = *opts.Knobs
	}
	if err := w.fs.MkdirAll(w.dir, 0o700); err != nil {
		return nil, fmt.Errorf("wal: create dir: %w", err)
	}
	pool, err := w.recover()
	if err != nil {
		w.closeFiles()
		return nil, err
	}
	w.wg.Add(1)
	go w.manage(pool)
	w.prepareReq <- w.active.seq + 1
	return w, nil
}

// Close stops the segment manager and closes the files. Call it after the
// last Write has returned; it does not sync (Write with sync did).
func (w *WAL) Close() error {
	var err error
	w.closeOnce.Do(func() {
		close(w.stop)
		w.wg.Wait()
		select {
		case p := <-w.prepared:
			if p.f != nil {
				err = p.f.Close()
			}
		default:
		}
		err = errors.Join(err, w.closeFiles())
	})
	return err
}

func (w *WAL) closeFiles() error {
	w.mu.Lock()
	segs := append(slices.Clone(w.segments), w.retired...)
	w.mu.Unlock()
	var err error
	for _, s := range segs {
		s.mu.Lock()
		if s.f != nil {
			err = errors.Join(err, s.f.Close())
			s.f = nil
		}
		s.mu.Unlock()
	}
	return err
}

// Groups lists the groups that have any state in the log, sorted.
func (w *WAL) Groups() []uint32 {
	w.mu.RLock()
	ids := make([]uint32, 0, len(w.groups))
	for id := range w.groups {
		ids = append(ids, id)
	}
	w.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// Stats returns the counters.
func (w *WAL) Stats() Stats {
	st := Stats{
		Writes:        w.stats.writes.Load(),
		BytesWritten:  w.stats.bytesWritten.Load(),
		Syncs:         w.stats.syncs.Load(),
		SyncDuration:  time.Duration(w.stats.syncNanos.Load()),
		CutOvers:      w.stats.cutOvers.Load(),
		Recycled:      w.stats.recycled.Load(),
		Removed:       w.stats.removed.Load(),
		TornTailBytes: w.stats.tornTail.Load(),
	}
	w.mu.RLock()
	st.Segments = len(w.segments)
	for _, s := range w.segments {
		st.SegmentBytes += s.size
	}
	w.mu.RUnlock()
	return st
}
