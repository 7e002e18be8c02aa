package deploy_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/stampede-lab/stampede/internal/testenv"
)

// alertRules is the part of alerts.yaml the tests read.
type alertRules struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// alertTests is the part of alerts_test.yaml the tests read.
type alertTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readAlertsYAML(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestAlertsQueryDocumentedMetrics checks that every alert queries only
// metrics of deploy.Metrics, with labels they have, names in its
// annotations only labels its expression keeps, has a severity, and is
// tested (alerts_test.yaml expects it to fire at least once).
func TestAlertsQueryDocumentedMetrics(t *testing.T) {
	var rules alertRules
	readAlertsYAML(t, "alerts.yaml", &rules)
	var tests alertTests
	readAlertsYAML(t, "alerts_test.yaml", &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	docs := documented()
	labelRE := regexp.MustCompile(`\$labels\.(\w+)`)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			q, err := parseQuery(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			if len(q.metrics) == 0 {
				t.Errorf("%s: %q queries no metric", r.Alert, r.Expr)
			}
			for _, name := range q.metrics {
				m, ok := docs[name]
				if !ok {
					t.Errorf("%s queries %s, which is not in deploy.Metrics (no Stampede service exports it)", r.Alert, name)
					continue
				}
				for _, l := range q.labels[name] {
					if !slices.Contains(append(m.Labels, "job", "instance"), l) {
						t.Errorf("%s matches label %q of %s, which has %v", r.Alert, l, name, m.Labels)
					}
				}
			}
			for _, ann := range r.Annotations {
				for _, m := range labelRE.FindAllStringSubmatch(ann, -1) {
					if !slices.Contains(q.grouped, m[1]) {
						t.Errorf("%s: an annotation names $labels.%s, which its expression does not keep (by %v)", r.Alert, m[1], q.grouped)
					}
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if !fires[r.Alert] {
				t.Errorf("%s has no test in alerts_test.yaml that expects it to fire", r.Alert)
			}
		}
	}
	if n < 5 {
		t.Errorf("alerts.yaml has %d rules, want at least 5", n)
	}
}

// TestAlertRulesPromtool runs Prometheus's own checks: promtool check
// rules (the rules parse, the expressions are valid PromQL) and promtool
// test rules (each rule fires on the series of its test and stays quiet
// on the healthy ones). promtool comes with Debian's prometheus package,
// which .ci/proxies installs.
func TestAlertRulesPromtool(t *testing.T) {
	promtool := testenv.Executable(t, "STAMPEDE_PROMTOOL", "promtool")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
