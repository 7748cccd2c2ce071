package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftgate/raftgate/internal/buildinfo"
)

// registerBuildInfo exports raftgate_build_info{version,commit,build_date,go_version} = 1.
func registerBuildInfo(reg prometheus.Registerer, b buildinfo.Info) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "raftgate", Name: "build_info",
		Help: "Always 1; the labels say which build this node runs.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "build_date": b.BuildDate, "go_version": b.GoVersion,
		},
	})
	g.Set(1)
	return reg.Register(g)
}
