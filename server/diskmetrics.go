package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// registerDiskMetrics exports the free and total space of the file system
// holding the data dir, read at scrape time, so that "disk nearly full" can
// be alerted on from raftgate's own metrics (a full disk stops the node's
// writes: docs/operations.md, Troubleshooting).
func registerDiskMetrics(reg prometheus.Registerer, dataDir string) error {
	statfs := func(field func(*unix.Statfs_t) uint64) func() float64 {
		return func() float64 {
			var st unix.Statfs_t
			if err := unix.Statfs(dataDir, &st); err != nil {
				return 0
			}
			return float64(field(&st)) * float64(st.Bsize)
		}
	}
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_data_dir_available_bytes",
			Help: "Space available to raftgate on the file system of --data-dir.",
		}, statfs(func(st *unix.Statfs_t) uint64 { return st.Bavail })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "raftgate_data_dir_capacity_bytes",
			Help: "Size of the file system of --data-dir.",
		}, statfs(func(st *unix.Statfs_t) uint64 { return st.Blocks })),
	} {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}
