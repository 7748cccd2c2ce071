package wal

import (
	raftpb "go.etcd.io/raft/v3/raftpb"
)

// entryLoc is where one entry lives: 24 bytes per entry in memory.
type entryLoc struct {
	term uint64
	seq  uint32 // segment sequence number (low 32 bits)
	off  uint32 // offset of the entry's encoding in the segment
	size uint32 // bytes of the encoding (entryFixedLen + data)
	typ  raftpb.EntryType
}

// group is one Raft group's log as the WAL knows it. Guarded by WAL.mu.
type group struct {
	// base is the index before the first entry; Term(base) = baseTerm.
	base, baseTerm uint64
	// locs[i] is entry base+1+i.
	locs []entryLoc

	hasHardState       bool
	term, vote, commit uint64

	// cache holds the last len(cache) entries, as the caller gave them.
	cache      []*raftpb.Entry
	cacheBytes int
}

func (g *group) last() uint64 { return g.base + uint64(len(g.locs)) }

func (g *group) cacheFirst() uint64 { return g.last() + 1 - uint64(len(g.cache)) }

// termAt answers for base <= i <= last.
func (g *group) termAt(i uint64) uint64 {
	if i == g.base {
		return g.baseTerm
	}
	return g.locs[i-g.base-1].term
}

// truncateFrom drops entries >= i (base < i <= last+1).
func (g *group) truncateFrom(i uint64) {
	cf := g.cacheFirst()
	g.locs = g.locs[:i-g.base-1]
	if len(g.cache) > 0 {
		keep := 0
		if i > cf {
			keep = int(i - cf)
		}
		for _, e := range g.cache[keep:] {
			g.cacheBytes -= cachedSize(e)
		}
		clear(g.cache[keep:])
		g.cache = g.cache[:keep]
	}
}

// compact forgets entries <= i (base < i <= last).
func (g *group) compact(i uint64) {
	g.baseTerm = g.termAt(i)
	n := i - g.base
	g.locs = g.locs[n:]
	g.base = i
	if over := len(g.cache) - len(g.locs); over > 0 {
		g.dropCacheFront(over)
	}
}

// reset empties the log so that it starts after (index, term).
func (g *group) reset(index, term uint64) {
	g.base, g.baseTerm = index, term
	g.locs = g.locs[:0]
	clear(g.cache)
	g.cache = g.cache[:0]
	g.cacheBytes = 0
}

func (g *group) dropCacheFront(n int) {
	for _, e := range g.cache[:n] {
		g.cacheBytes -= cachedSize(e)
	}
	clear(g.cache[:n])
	g.cache = g.cache[n:]
}

// cacheAppend adds entries just appended at the log's end, then evicts the
// oldest beyond limit bytes (keeping at least the newest entry).
func (g *group) cacheAppend(ents []*raftpb.Entry, limit int) {
	for _, e := range ents {
		g.cache = append(g.cache, e)
		g.cacheBytes += cachedSize(e)
	}
	n := 0
	for g.cacheBytes > limit && n < len(g.cache)-1 {
		g.cacheBytes -= cachedSize(g.cache[n])
		n++
	}
	if n > 0 {
		clear(g.cache[:n])
		g.cache = g.cache[n:]
	}
}

// cachedSize is the bytes an entry is charged in the cache.
func cachedSize(e *raftpb.Entry) int { return len(e.GetData()) + 64 }

func entryType(b byte) raftpb.EntryType { return raftpb.EntryType(b) }
