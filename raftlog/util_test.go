package raftlog

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func testCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func testHistogram(h prometheus.Histogram) (count uint64, sum float64) {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0, 0
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}
