// Command fsyncprobe measures what a bbolt-shaped commit costs on this
// disk: N random 4 KiB page writes and an fdatasync, then one "meta" page
// and a second fdatasync, in a loop. It prints commits per second, wall
// time and CPU time (user+system of this process) per commit. Run several
// at once to see how processes that share a disk (three raftgate nodes on
// one machine) slow each other down:
//
//	go build -o /tmp/fsyncprobe ./fsyncprobe
//	for p in 40 20 8; do /tmp/fsyncprobe -pages $p & /tmp/fsyncprobe -pages $p & /tmp/fsyncprobe -pages $p; wait; done
//
// With -threads N it measures a log-shaped write instead: N goroutines
// each append -size bytes (4 KiB) to the same zero-filled file and
// fdatasync it, in a loop, so several fdatasyncs of one file are in flight
// at once (what a write-ahead log with more than one sync in flight does).
// It prints fdatasyncs per second and the p50 and p99 of one append +
// fdatasync.
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	pages := flag.Int("pages", 32, "data pages written before the first fdatasync")
	dir := flag.String("dir", ".", "directory for the scratch file (use the disk under test)")
	d := flag.Duration("duration", 5*time.Second, "how long to run")
	threads := flag.Int("threads", 0, "if > 0: concurrent appends + fdatasync of one file (see the doc)")
	size := flag.Int("size", 4096, "with -threads: bytes per append (any size, page-aligned or not)")
	flag.Parse()
	if *threads > 0 {
		if *size < 1 || *size > 1<<20 {
			log.Fatal("-size must be from 1 to 1048576 bytes")
		}
		appendProbe(*dir, *threads, *size, *d)
		return
	}

	f := scratchFile(*dir)
	defer os.Remove(filepath.Clean(f.Name()))
	if err := f.Truncate(fileSize); err != nil {
		log.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		log.Fatal(err)
	}
	page := make([]byte, 4096)
	fd := int(f.Fd())
	c0, t0 := cpuTime(), time.Now()
	n := 0
	for time.Since(t0) < *d {
		for range *pages {
			if _, err := f.WriteAt(page, int64(rand.IntN(fileSize/4096))*4096); err != nil {
				log.Fatal(err)
			}
		}
		if err := syscall.Fdatasync(fd); err != nil {
			log.Fatal(err)
		}
		if _, err := f.WriteAt(page, 0); err != nil {
			log.Fatal(err)
		}
		if err := syscall.Fdatasync(fd); err != nil {
			log.Fatal(err)
		}
		n++
	}
	el := time.Since(t0)
	fmt.Printf("pages=%d commits/s=%.0f wall/commit=%v cpu/commit=%v\n",
		*pages, float64(n)/el.Seconds(), el/time.Duration(n), (cpuTime()-c0)/time.Duration(n))
}

// fileSize is the size of the scratch file.
const fileSize = 64 << 20

// scratchFile creates the probe's file in dir; the caller removes it.
func scratchFile(dir string) *os.File {
	f, err := os.CreateTemp(dir, "fsyncprobe-*.dat")
	if err != nil {
		log.Fatal(err)
	}
	return f
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// appendProbe runs threads goroutines that each append size bytes to one
// zero-filled file (so no fdatasync has to change its size) and fdatasync
// it, for d.
func appendProbe(dir string, threads, size int, d time.Duration) {
	f := scratchFile(dir)
	defer os.Remove(filepath.Clean(f.Name()))
	if _, err := f.WriteAt(make([]byte, fileSize), 0); err != nil {
		log.Fatal(err)
	}
	fd := int(f.Fd())
	if err := syscall.Fdatasync(fd); err != nil {
		log.Fatal(err)
	}
	var next atomic.Int64
	lats := make([][]time.Duration, threads)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, size)
			for time.Since(t0) < d {
				off := (next.Add(int64(size)) - int64(size)) % (fileSize - int64(size))
				start := time.Now()
				if _, err := f.WriteAt(buf, off); err != nil {
					log.Fatal(err)
				}
				if err := syscall.Fdatasync(fd); err != nil {
					log.Fatal(err)
				}
				lats[i] = append(lats[i], time.Since(start))
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lats...)
	if len(all) == 0 {
		log.Fatal("no fdatasync completed within -duration")
	}
	slices.Sort(all)
	fmt.Printf("threads=%d size=%d fdatasyncs/s=%.0f p50=%v p99=%v\n", threads, size,
		float64(len(all))/time.Since(t0).Seconds(), all[len(all)/2], all[len(all)*99/100])
}
