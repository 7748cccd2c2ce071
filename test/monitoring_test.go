package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/raftgate/raftgate/internal/testutil"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

const (
	dashboardFile = "../deploy/monitoring/raftgate-dashboard.json"
	rulesFile     = "../deploy/monitoring/raftgate-alerts.yml"
)

// pendingMetrics are named by the dashboard and the rules before the
// product exports them. Remove an entry once its metric is exported (the
// test then checks it like the others). None is pending now.
var pendingMetrics = map[string][]string{}

// prometheusLabels are added by Prometheus to every scraped series, and up
// is the series it records per target.
var prometheusLabels = []string{"job", "instance"}

// exported is what the product's /metrics exposes: metric name → label
// names. A histogram counts as its _bucket (with le), _sum and _count.
type exported map[string]map[string]bool

func (e exported) add(name string, labels ...string) {
	if e[name] == nil {
		e[name] = map[string]bool{}
	}
	for _, l := range labels {
		e[name][l] = true
	}
}

func (e exported) addFamilies(families map[string]*dto.MetricFamily) {
	for name, mf := range families {
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			e.add(name+"_bucket", append(labels, "le")...)
			e.add(name+"_sum", labels...)
			e.add(name+"_count", labels...)
		case dto.MetricType_SUMMARY:
			e.add(name, append(labels, "quantile")...)
			e.add(name+"_sum", labels...)
			e.add(name+"_count", labels...)
		default:
			e.add(name, labels...)
		}
	}
}

// scrape reads node n's /metrics.
func scrape(t *testing.T, n *node) map[string]*dto.MetricFamily {
	t.Helper()
	r, err := do(context.Background(), http.MethodGet, n.adminURL()+"/metrics", nil, nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("node %d /metrics: %v %+v", n.id, err, r)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("node %d /metrics does not parse: %v", n.id, err)
	}
	return families
}

// gaugeValues returns metric name's values on one node by the value of
// label.
func gaugeValues(families map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range families[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out[lp.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestMonitoringMatchesMetrics starts a real three-node cluster, drives a
// little traffic, scrapes every node's /metrics and fails if
// deploy/monitoring's dashboard or alert rules name a metric or a label the
// product does not export. It also checks the per-group leadership gauges
// against the cluster, and runs promtool check rules when promtool is
// installed (in CI it must be: .ci/run installs it).
func TestMonitoringMatchesMetrics(t *testing.T) {
	c := startCluster(t, clusterOpts{nodes: 3})
	rec := newRecorder(t)
	c.registerService(c.nodes[0], "Echo", rec.srv.URL)
	ctx := context.Background()
	for _, n := range c.nodes {
		if r, err := do(ctx, http.MethodPost, n.ingressURL()+"/Echo/echo", []byte(`"m"`), nil); err != nil || r.status != http.StatusOK {
			t.Fatalf("call via node %d: %v %+v", n.id, err, r)
		}
		do(ctx, http.MethodPost, n.ingressURL()+"/Nope/x", []byte(`{}`), nil) // a 404, so code labels exist
	}

	// Every group has one leader, known to every node.
	var all []map[string]*dto.MetricFamily
	testutil.WaitFor(t, 10*time.Second, "one leader per group in the metrics of every node", func() bool {
		all = all[:0]
		leaders := map[string]float64{}
		ok := true
		for _, n := range c.nodes {
			f := scrape(t, n)
			all = append(all, f)
			has := gaugeValues(f, "raftgate_raft_has_leader", "group")
			if len(has) != 3 { // metadata + 2 partitions
				ok = false
			}
			for _, v := range has {
				ok = ok && v == 1
			}
			for g, v := range gaugeValues(f, "raftgate_raft_is_leader", "group") {
				leaders[g] += v
			}
		}
		for _, v := range leaders {
			ok = ok && v == 1
		}
		return ok && len(leaders) == 3
	})
	have := exported{}
	for _, f := range all {
		have.addFamilies(f)
	}
	have.add("up")
	for name, labels := range pendingMetrics {
		if _, ok := have[name+"_bucket"]; ok {
			t.Errorf("%s is exported now: remove it from pendingMetrics", name)
		}
		have.addFamilies(map[string]*dto.MetricFamily{name: {Type: dto.MetricType_HISTOGRAM.Enum()}})
		have.add(name+"_bucket", labels...)
	}
	// Series a test cluster does not produce, whose names and labels are
	// still the product's: replica lag exists only on leaders (present
	// here), deliveries after a delivery (done above).
	for _, name := range []string{"raftgate_raft_replica_lag_entries", "raftgate_partition_deliveries_total", "raftgate_ingress_requests_total"} {
		if have[name] == nil {
			t.Fatalf("the cluster does not export %s after the traffic above", name)
		}
	}

	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("only %d expressions found in the dashboard", len(exprs))
	}
	exprs = append(exprs, ruleExprs(t)...)
	for _, e := range exprs {
		metrics, labels := promqlNames(e.expr)
		if len(metrics) == 0 {
			t.Errorf("%s: no metric found in %q", e.where, e.expr)
		}
		for _, m := range metrics {
			if have[m] == nil {
				t.Errorf("%s: metric %s is not exported (expr %q)", e.where, m, e.expr)
			}
		}
		for _, l := range append(labels, e.labels...) {
			if slices.Contains(prometheusLabels, l) {
				continue
			}
			found := false
			for _, m := range metrics {
				found = found || have[m][l]
			}
			if !found {
				t.Errorf("%s: label %s is not exported by %v (expr %q)", e.where, l, metrics, e.expr)
			}
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed (CI installs it: .ci/run)")
		}
		t.Skip("promtool not installed: apt-get install prometheus")
	}
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// namedExpr is a PromQL expression of the dashboard or the rules, with
// the labels its legend or annotations use.
type namedExpr struct {
	where, expr string
	labels      []string
}

// templateLabels finds {{label}} (Grafana legends) and {{ $labels.label }}
// (rule annotations).
var templateLabels = regexp.MustCompile(`\{\{\s*(?:\$labels\.)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

func labelsIn(texts ...string) []string {
	var out []string
	for _, text := range texts {
		for _, m := range templateLabels.FindAllStringSubmatch(text, -1) {
			if m[1] != "value" {
				out = append(out, m[1])
			}
		}
	}
	return out
}

func dashboardExprs(t *testing.T) []namedExpr {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []namedExpr
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, namedExpr{where: "dashboard panel " + p.Title, expr: tg.Expr, labels: labelsIn(tg.LegendFormat)})
		}
	}
	// Variables: label_values(metric, label).
	lv := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := lv.FindStringSubmatch(v.Query)
		if m == nil {
			t.Fatalf("dashboard variable %s: query %q is not label_values(metric, label)", v.Name, v.Query)
		}
		out = append(out, namedExpr{where: "dashboard variable " + v.Name, expr: m[1], labels: []string{m[2]}})
	}
	return out
}

func ruleExprs(t *testing.T) []namedExpr {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Record      string            `yaml:"record"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []namedExpr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			var texts []string
			for _, a := range r.Annotations {
				texts = append(texts, a)
			}
			out = append(out, namedExpr{where: "alert " + r.Alert + r.Record, expr: r.Expr, labels: labelsIn(texts...)})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return out
}

// promqlKeywords are the words of PromQL that are not metric names:
// aggregation operators (which may be followed by by/without before their
// parenthesis), set and binary modifiers.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "group": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

// promqlNames returns the metric names and the label names an expression
// uses (in matchers and in by/without/on/ignoring/group_* lists). It is a
// lexer, not a parser: enough for the expressions shipped here, and
// promtool checks their syntax.
func promqlNames(expr string) (metrics, labels []string) {
	s := expr
	inBraces := false
	expectLabelList := false
	inLabelList := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '[': // range or subquery durations
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return
			}
			i += j + 1
		case c == '{':
			inBraces = true
			i++
		case c == '}':
			inBraces = false
			i++
		case c == '(':
			if expectLabelList {
				inLabelList, expectLabelList = true, false
			}
			i++
		case c == ')':
			inLabelList = false
			i++
		case c == '$': // Grafana variables such as $__rate_interval
			j := i + 1
			for j < len(s) && (isIdent(s[j]) || s[j] == '{' || s[j] == '}') {
				j++
			}
			i = j
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			i = j
			rest := strings.TrimLeft(s[i:], " \t\n")
			switch {
			case inBraces || inLabelList:
				labels = append(labels, word)
			case promqlKeywords[strings.ToLower(word)]:
				switch word {
				case "by", "without", "on", "ignoring", "group_left", "group_right":
					expectLabelList = true
				}
			case strings.HasPrefix(rest, "("): // a function or aggregation
			default:
				metrics = append(metrics, word)
			}
		case c >= '0' && c <= '9': // numbers, and durations such as 5m
			j := i
			for j < len(s) && (isIdent(s[j]) || s[j] == '.') {
				j++
			}
			i = j
		default:
			i++
		}
	}
	return metrics, labels
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdent(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func TestPromqlNames(t *testing.T) {
	m, l := promqlNames(`histogram_quantile(0.99, sum by (le, instance) (rate(a_bucket{job="x", code=~"5.."}[5m]))) > 0.1 or b / on (group) c offset 5m and 24 * 3600`)
	if got, want := fmt.Sprint(m, l), "[a_bucket b c] [le instance job code group]"; got != want {
		t.Fatalf("promqlNames = %s, want %s", got, want)
	}
}

// TestDashboardShowsInvocationRate: the dashboard charts the cluster's
// invocation rate, and its titles name the data dir's files as they are
// (state.db; raft.db is the first release's).
func TestDashboardShowsInvocationRate(t *testing.T) {
	rate := false
	for _, e := range dashboardExprs(t) {
		if strings.Contains(e.where, "raft.db") {
			t.Errorf("%s: the data dir has no raft.db (docs/operations.md, \"The data directory\")", e.where)
		}
		rate = rate || strings.Contains(e.expr, "rate(raftgate_partition_invocations_accepted_total")
	}
	if !rate {
		t.Error("no dashboard panel charts the rate of invocations accepted")
	}
}
