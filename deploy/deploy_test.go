package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/stampede-lab/stampede/deploy"
)

// documented maps every series name a query may use (a histogram's
// _bucket, _sum and _count included) to its metric.
func documented() map[string]deploy.Metric {
	m := map[string]deploy.Metric{}
	for _, d := range deploy.Metrics {
		m[d.Name] = d
		if d.Type == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				m[d.Name+s] = d
			}
		}
	}
	return m
}

// query is what one PromQL expression uses.
type query struct {
	metrics []string            // series names
	labels  map[string][]string // label matchers, by the series they follow
	grouped []string            // labels of by/without/on/ignoring clauses
}

var (
	tokenRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\[[^\]]*\]|[a-zA-Z_:][a-zA-Z0-9_:]*|\$[a-zA-Z_]+|[0-9.]+|=~|!~|!=|==|>=|<=|[{}()=,+\-*/<>^%]`)
	// keywords are PromQL words that are not series names.
	keywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true}
)

// parseQuery reads the series names and labels of a PromQL expression: an
// identifier followed by "(" is a function or an aggregation, "{...}"
// holds label matchers, "by (...)" and the like hold label names.
func parseQuery(expr string) (query, error) {
	q := query{labels: map[string][]string{}}
	toks := tokenRE.FindAllString(expr, -1)
	if got, want := strings.Join(toks, ""), strings.Join(strings.Fields(expr), ""); got != want {
		return q, fmt.Errorf("cannot read %q (read %q)", expr, got)
	}
	isIdent := regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`).MatchString
	last := ""
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case keywords[t]:
			if (t == "by" || t == "without" || t == "on" || t == "ignoring" || t == "group_left" || t == "group_right") && next == "(" {
				for i += 2; i < len(toks) && toks[i] != ")"; i++ {
					if toks[i] != "," {
						q.grouped = append(q.grouped, toks[i])
					}
				}
			}
		case t == "{":
			for i++; i < len(toks) && toks[i] != "}"; i++ {
				if isIdent(toks[i]) && i+1 < len(toks) && strings.ContainsAny(toks[i+1], "=~!") {
					q.labels[last] = append(q.labels[last], toks[i])
					i += 2 // the operator and the value
				}
			}
		case isIdent(t) && next != "(" && next != "by" && next != "without": // sum by (x) (...) is an aggregation
			q.metrics = append(q.metrics, t)
			last = t
		}
	}
	return q, nil
}

func TestParseQuery(t *testing.T) {
	q, err := parseQuery(`histogram_quantile(0.99, sum by (le, route) (rate(http_request_duration_seconds_bucket{job=~"$job", code!="200"}[$__rate_interval]))) / on (route) x_total`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q.metrics, []string{"http_request_duration_seconds_bucket", "x_total"}) ||
		!slices.Equal(q.grouped, []string{"le", "route", "route"}) ||
		!slices.Equal(q.labels["http_request_duration_seconds_bucket"], []string{"job", "code"}) {
		t.Errorf("parseQuery = %+v", q)
	}
}

// panel is the part of a Grafana panel the test reads.
type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		RefID        string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
			Current    struct {
				Value any `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("grafana", "stampede.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/stampede.json: %v", err)
	}
	return d
}

// TestDashboardQueriesDocumentedMetrics checks that every metric the
// dashboard queries is one of deploy.Metrics, with labels it has, and that
// every documented metric is on the dashboard.
func TestDashboardQueriesDocumentedMetrics(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: want both", d.UID, d.Title)
	}
	docs := documented()
	used := map[string]bool{}
	ids := map[int]bool{}
	legendRE := regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)
	var check func(p panel)
	check = func(p panel) {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		for _, sub := range p.Panels {
			check(sub)
		}
		if p.Type == "row" {
			return
		}
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			q, err := parseQuery(tg.Expr)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			if len(q.metrics) == 0 {
				t.Errorf("panel %q: %q queries no metric", p.Title, tg.Expr)
			}
			allowed := map[string]bool{"job": true, "instance": true}
			for _, name := range q.metrics {
				m, ok := docs[name]
				if !ok {
					t.Errorf("panel %q queries %s, which is not in deploy.Metrics", p.Title, name)
					continue
				}
				used[m.Name] = true
				mine := map[string]bool{"job": true, "instance": true}
				for _, l := range m.Labels {
					allowed[l], mine[l] = true, true
				}
				if m.Type == "histogram" {
					allowed["le"], mine["le"] = true, true
				}
				for _, l := range q.labels[name] {
					if !mine[l] {
						t.Errorf("panel %q matches label %q of %s, which has %v", p.Title, l, name, m.Labels)
					}
				}
			}
			for _, l := range q.grouped {
				if !allowed[l] {
					t.Errorf("panel %q groups by %q, a label none of %v has", p.Title, l, q.metrics)
				}
			}
			for _, m := range legendRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !allowed[m[1]] {
					t.Errorf("panel %q: legend {{%s}} is a label none of %v has", p.Title, m[1], q.metrics)
				}
			}
		}
	}
	for _, p := range d.Panels {
		check(p)
	}
	labelValuesRE := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		if d, ok := docs[m[1]]; !ok || !slices.Contains(append(d.Labels, "job", "instance"), m[2]) {
			t.Errorf("variable %s: %s is not a documented metric with label %s", v.Name, m[1], m[2])
		}
	}
	for _, m := range deploy.Metrics {
		if !used[m.Name] {
			t.Errorf("%s is documented but not on the dashboard", m.Name)
		}
	}
}

// composeService is the part of a compose service the tests read.
type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Secrets     []string          `yaml:"secrets"`
}

// httpPort is the port of a stampede service's --http flag.
func (s composeService) httpPort() string {
	if i := slices.Index(s.Command, "--http"); i >= 0 && i+1 < len(s.Command) {
		return s.Command[i+1][strings.LastIndex(s.Command[i+1], ":")+1:]
	}
	return ""
}

// TestPrometheusScrapesEveryService checks that prometheus.yml scrapes
// every stampede service of compose.yaml on its --http port, and nothing
// else; and a waiting room (whose metrics name rooms) with the metrics
// token those services are given, read from a compose secret.
func TestPrometheusScrapesEveryService(t *testing.T) {
	var compose struct {
		Services map[string]composeService `yaml:"services"`
		Secrets  map[string]struct {
			Environment string `yaml:"environment"`
		} `yaml:"secrets"`
	}
	readYAML(t, "compose.yaml", &compose)
	want := map[string]bool{}
	for name, s := range compose.Services {
		if s.Image == "stampede:dev" {
			want[name+":"+s.httpPort()] = true
		}
	}
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			Authorization *struct {
				Type            string `yaml:"type"`
				CredentialsFile string `yaml:"credentials_file"`
			} `yaml:"authorization"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus.yml", &prom)
	got := map[string]bool{}
	byTarget := map[string]string{}
	for name, s := range compose.Services {
		byTarget[name+":"+s.httpPort()] = name
	}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				got[target] = true
				if !want[target] {
					t.Errorf("job %s scrapes %s, which is not a stampede service of compose.yaml", sc.JobName, target)
					continue
				}
				svc := compose.Services[byTarget[target]]
				if !slices.Contains(svc.Command, "waitroom") && !slices.Contains(svc.Command, "gate") && !slices.Contains(svc.Command, "forward-auth") {
					continue
				}
				// A waiting room: its metrics need the metrics token, which
				// Prometheus reads from a secret holding the variable the
				// service takes as STAMPEDE_METRICS_TOKEN.
				a := sc.Authorization
				if a == nil || (a.Type != "" && a.Type != "Bearer") || !strings.HasPrefix(a.CredentialsFile, "/run/secrets/") {
					t.Errorf("job %s scrapes the waiting room %s without a bearer credentials_file from a secret: %+v", sc.JobName, target, a)
					continue
				}
				secret := strings.TrimPrefix(a.CredentialsFile, "/run/secrets/")
				if !slices.Contains(compose.Services["prometheus"].Secrets, secret) {
					t.Errorf("job %s reads the secret %s, which compose's prometheus is not given", sc.JobName, secret)
				}
				env := compose.Secrets[secret].Environment
				if v := svc.Environment["STAMPEDE_METRICS_TOKEN"]; env == "" || !strings.HasPrefix(v, "${"+env+":") && v != "${"+env+"}" {
					t.Errorf("%s's STAMPEDE_METRICS_TOKEN is %q, want the variable %q of the secret %s Prometheus reads", target, v, env, secret)
				}
			}
		}
	}
	if len(want) < 5 {
		t.Errorf("compose.yaml has %d stampede services, want 5 or more", len(want))
	}
	for target := range want {
		if !got[target] {
			t.Errorf("prometheus.yml does not scrape %s", target)
		}
	}

	// Grafana gets the dashboard and a data source with the uid the
	// dashboard's variable defaults to.
	g := compose.Services["grafana"]
	for _, v := range []string{"./grafana/provisioning:/etc/grafana/provisioning:ro", "./grafana/stampede.json:/var/lib/grafana/dashboards/stampede.json:ro"} {
		if !slices.Contains(g.Volumes, v) {
			t.Errorf("grafana lacks the volume %s", v)
		}
	}
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yaml", &ds)
	var dsVar any
	for _, v := range readDashboard(t).Templating.List {
		if v.Name == "datasource" {
			dsVar = v.Current.Value
		}
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != dsVar || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("provisioned data sources %+v, want one with uid %v at http://prometheus:9090", ds.Datasources, dsVar)
	}
	var dp struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/stampede.yaml", &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Errorf("dashboard providers %+v, want one reading /var/lib/grafana/dashboards", dp.Providers)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
