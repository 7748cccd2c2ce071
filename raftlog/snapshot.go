package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshots carry a group's state bucket, serialised generically so raftlog
// needs to know nothing about the state machine:
//
//	"RLSNAP1\n" record* 'Z' crc32(everything before 'Z', 4 bytes BE)
//	record := 'K' uvarint(len) key uvarint(len) value   a key in the current bucket
//	        | 'B' uvarint(len) name                     enter a nested bucket
//	        | 'S' uvarint(seq)                          the current bucket's sequence
//	        | 'E'                                       leave the nested bucket
//
// The leader's raft.Storage.Snapshot returns metadata only. When raft emits
// MsgSnap, the sender opens a bbolt read transaction (the last
// checkpoint), reads the applied index and term stored with the state,
// rewrites the message's metadata to them and streams the bucket in chunks
// from that one consistent view. The checkpoint is never behind the
// compaction point, so the follower gets everything the leader's log no
// longer has. The receiver spools the chunks to a file under
// DataDir/snapshots and steps the MsgSnap with Data = the file's path; the
// applier installs it from there. The path is set by the receiver: a
// MsgSnap arriving on the Send RPC (whose Data would be the sender's
// choice) is refused by Node.deliver.

const (
	snapMagic     = "RLSNAP1\n"
	snapChunkSize = 256 << 10
	snapDirName   = "snapshots"
)

var errBadSnapshot = errors.New("raftlog: bad snapshot")

// snapshotChunkFunc receives the snapshot stream: msg (the rewritten
// MsgSnap) with the first chunk only, then data chunks; last marks the end.
type snapshotChunkFunc func(msg *pb.Message, data []byte, last bool) error

// streamSnapshot serialises group id's state for MsgSnap m.
func (n *Node) streamSnapshot(id GroupID, m *pb.Message, emit snapshotChunkFunc) error {
	return n.db.View(func(tx *bolt.Tx) error {
		gb, err := openGroupBuckets(tx, id)
		if err != nil {
			return err
		}
		idx, term, err := decodePair(gb.meta.Get(keyApplied))
		if err != nil {
			return err
		}
		conf := &pb.ConfState{}
		if err := proto.Unmarshal(gb.meta.Get(keyConf), conf); err != nil {
			return fmt.Errorf("conf state: %w", err)
		}
		msg := proto.Clone(m).(*pb.Message)
		msg.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: new(idx), Term: new(term), ConfState: conf}}
		return encodeSnapshotStream(&chunkWriter{emit: emit, first: msg}, gb.state)
	})
}

// encodeSnapshotStream writes b's serialisation through cw in chunks.
func encodeSnapshotStream(cw *chunkWriter, b *bolt.Bucket) error {
	crc := crc32.NewIEEE()
	bw := bufio.NewWriterSize(cw, snapChunkSize)
	enc := snapEncoder{w: io.MultiWriter(bw, crc)}
	enc.raw([]byte(snapMagic))
	enc.bucket(b)
	if enc.err != nil {
		return enc.err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	var trailer [5]byte
	trailer[0] = 'Z'
	crc.Write(trailer[:1])
	binary.BigEndian.PutUint32(trailer[1:], crc.Sum32())
	cw.pending = append(cw.pending, trailer[:]...)
	return cw.finish()
}

// chunkWriter turns a byte stream into chunks handed to emit.
type chunkWriter struct {
	emit    snapshotChunkFunc
	first   *pb.Message
	pending []byte
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if len(c.pending) > 0 {
		if err := c.send(false); err != nil {
			return 0, err
		}
	}
	c.pending = append(c.pending[:0], p...)
	return len(p), nil
}

func (c *chunkWriter) send(last bool) error {
	msg := c.first
	c.first = nil
	err := c.emit(msg, c.pending, last)
	c.pending = c.pending[:0]
	return err
}

func (c *chunkWriter) finish() error { return c.send(true) }

type snapEncoder struct {
	w   io.Writer
	buf []byte
	err error
}

func (e *snapEncoder) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *snapEncoder) record(tag byte, fields ...[]byte) {
	e.buf = append(e.buf[:0], tag)
	for _, f := range fields {
		e.buf = binary.AppendUvarint(e.buf, uint64(len(f)))
		e.buf = append(e.buf, f...)
	}
	e.raw(e.buf)
}

func (e *snapEncoder) bucket(b *bolt.Bucket) {
	if seq := b.Sequence(); seq != 0 {
		e.buf = binary.AppendUvarint(append(e.buf[:0], 'S'), seq)
		e.raw(e.buf)
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil && e.err == nil; k, v = c.Next() {
		if v != nil {
			e.record('K', k, v)
			continue
		}
		e.record('B', k)
		e.bucket(b.Bucket(k))
		e.raw([]byte{'E'})
	}
}

// snapshotFill is how full bbolt fills a page of an installed snapshot's
// buckets before it splits one: their keys arrive in order, so bbolt's
// default (half) would leave every page half empty.
const snapshotFill = 0.9

// decodeSnapshotInto fills the empty bucket b from r.
func decodeSnapshotInto(r io.Reader, b *bolt.Bucket) error {
	d := newSnapshotLoader(r)
	done, err := d.load(b, 0)
	if err == nil && !done {
		err = fmt.Errorf("%w: not finished", errBadSnapshot)
	}
	return err
}

// snapshotLoader decodes a snapshot stream into a bucket, in steps: each
// load writes about a budget of bytes and may run in a transaction of its
// own (the bucket is found again from its path), so a large install does
// not hold the applier, which every group shares, for its whole length.
type snapshotLoader struct {
	d       *snapDecoder
	started bool
	// path names the buckets from the root to the current one.
	path [][]byte
}

func newSnapshotLoader(r io.Reader) *snapshotLoader {
	return &snapshotLoader{d: &snapDecoder{r: bufio.NewReaderSize(r, 64<<10), crc: crc32.NewIEEE()}}
}

// load decodes records into root (the bucket the snapshot fills, empty at
// the first call) until it wrote budget bytes of keys and values (0: no
// bound) or the stream ended, checksum checked: then done.
func (l *snapshotLoader) load(root *bolt.Bucket, budget int) (done bool, err error) {
	d := l.d
	if !l.started {
		l.started = true
		magic := d.bytes(len(snapMagic))
		if d.err != nil || string(magic) != snapMagic {
			return false, fmt.Errorf("%w: header", errBadSnapshot)
		}
	}
	root.FillPercent = snapshotFill
	cur := root
	for _, name := range l.path {
		if cur = cur.Bucket(name); cur == nil {
			return false, fmt.Errorf("raftlog: snapshot load: bucket %q gone between steps", name)
		}
		cur.FillPercent = snapshotFill
	}
	written := 0
	for d.err == nil && (budget == 0 || written < budget) {
		tag := d.byte()
		if d.err != nil {
			break
		}
		switch tag {
		case 'K':
			k := d.field()
			v := d.field()
			if d.err == nil {
				d.err = cur.Put(k, v)
				written += len(k) + len(v)
			}
		case 'B':
			name := d.field()
			if d.err == nil {
				var nb *bolt.Bucket
				if nb, d.err = cur.CreateBucket(name); d.err == nil {
					nb.FillPercent = snapshotFill
					cur = nb
					l.path = append(l.path, name)
				}
			}
		case 'S':
			seq := d.uvarint()
			if d.err == nil {
				d.err = cur.SetSequence(seq)
			}
		case 'E':
			if len(l.path) == 0 {
				return false, fmt.Errorf("%w: unbalanced bucket end", errBadSnapshot)
			}
			l.path = l.path[:len(l.path)-1]
			cur = root
			for _, name := range l.path {
				cur = cur.Bucket(name)
			}
		case 'Z':
			want := d.crc.Sum32()
			var got [4]byte
			if _, err := io.ReadFull(d.r, got[:]); err != nil {
				return false, fmt.Errorf("%w: trailer: %w", errBadSnapshot, err)
			}
			if binary.BigEndian.Uint32(got[:]) != want || len(l.path) != 0 {
				return false, fmt.Errorf("%w: checksum", errBadSnapshot)
			}
			return true, nil
		default:
			return false, fmt.Errorf("%w: record tag %q", errBadSnapshot, tag)
		}
	}
	if d.err != nil {
		return false, fmt.Errorf("%w: %w", errBadSnapshot, d.err)
	}
	return false, nil
}

type snapDecoder struct {
	r   *bufio.Reader
	crc interface {
		io.Writer
		Sum32() uint32
	}
	err error
}

func (d *snapDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	c, err := d.r.ReadByte()
	if err != nil {
		d.err = err
		return 0
	}
	d.crc.Write([]byte{c})
	return c
}

func (d *snapDecoder) uvarint() uint64 {
	var x uint64
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		c := d.byte()
		if d.err != nil {
			return 0
		}
		if c < 0x80 {
			return x | uint64(c)<<s
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	d.err = fmt.Errorf("%w: varint", errBadSnapshot)
	return 0
}

func (d *snapDecoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(d.r, p); err != nil {
		d.err = err
		return nil
	}
	d.crc.Write(p)
	return p
}

func (d *snapDecoder) field() []byte {
	n := d.uvarint()
	if d.err == nil && n > 1<<30 {
		d.err = fmt.Errorf("%w: field length %d", errBadSnapshot, n)
	}
	return d.bytes(int(n))
}

// snapshotSink spools one incoming snapshot to a file. It holds one of
// the node's incoming snapshot slots (snapshotlimit.go) until finish or
// abort.
type snapshotSink struct {
	n       *Node
	group   GroupID
	msg     *pb.Message
	f       *os.File
	release sync.Once
}

// newSnapshotSink starts receiving a snapshot; errSnapshotsBusy when the
// node receives as many as it may.
func (n *Node) newSnapshotSink(group GroupID, msg *pb.Message) (*snapshotSink, error) {
	if msg.GetType() != pb.MsgSnap || msg.GetSnapshot().GetMetadata() == nil {
		return nil, fmt.Errorf("%w: first chunk is not a MsgSnap", errBadSnapshot)
	}
	if !n.snaps.startReceive() {
		return nil, errSnapshotsBusy
	}
	f, err := os.CreateTemp(filepath.Join(n.cfg.DataDir, snapDirName),
		fmt.Sprintf("g%d-%d-*.snap", group, msg.GetSnapshot().GetMetadata().GetIndex()))
	if err != nil {
		n.snaps.doneReceive()
		return nil, fmt.Errorf("raftlog: snapshot spool: %w", err)
	}
	return &snapshotSink{n: n, group: group, msg: msg, f: f}, nil
}

// done gives the incoming slot back, once.
func (s *snapshotSink) done() { s.release.Do(s.n.snaps.doneReceive) }

func (s *snapshotSink) write(p []byte) error {
	_, err := s.f.Write(p)
	return err
}

// finish closes the file and steps the MsgSnap into the group.
func (s *snapshotSink) finish() error {
	defer s.done()
	if err := s.f.Close(); err != nil {
		_ = os.Remove(s.f.Name())
		return err
	}
	switch s.n.deliverSnapshot(s.group, s.msg, s.f.Name()) {
	case delivered:
	case fromRemoved:
		_ = os.Remove(s.f.Name())
		return fmt.Errorf("raftlog: group %d: snapshot from replica %#x: %w", s.group, s.msg.GetFrom(), ErrRemoved)
	default:
		_ = os.Remove(s.f.Name())
		return fmt.Errorf("raftlog: group %d: not accepting snapshot", s.group)
	}
	s.n.metrics.snapshotsReceived.Inc()
	return nil
}

func (s *snapshotSink) abort() {
	defer s.done()
	_ = s.f.Close()
	_ = os.Remove(s.f.Name())
}
