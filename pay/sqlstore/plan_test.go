package sqlstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stampede-lab/stampede/internal/sqldb"
	"github.com/stampede-lab/stampede/internal/testenv"
	"github.com/stampede-lab/stampede/pay/postgres"
	"github.com/stampede-lab/stampede/pay/sqlite"
	"github.com/stampede-lab/stampede/pay/sqlstore"
)

// partialScans are the indexes a money-path statement may scan from end
// to end: partial indexes whose rows are a backlog (unpublished outbox
// rows, payments due for an inquiry, pending deliveries, captures and
// voids due for an inquiry, authorisations awaiting their capture),
// which the service drains, not a history that grows with every payment.
var partialScans = []string{"outbox_unpublished", "payments_due", "webhook_deliveries_due", "webhook_deliveries_pending",
	"payment_operations_due", "payments_authorized"}

// placeholder matches a statement's parameters in either dialect.
var placeholder = regexp.MustCompile(`[$?](\d+)`)

// params returns how many parameters query numbers.
func params(query string) int {
	n := 0
	for _, m := range placeholder.FindAllStringSubmatch(query, -1) {
		i, _ := strconv.Atoi(m[1])
		n = max(n, i)
	}
	return n
}

// sqliteScan matches a plan line that reads a whole table, or a whole
// index (group 2).
var sqliteScan = regexp.MustCompile(`\bSCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?`)

// TestMoneyPathPlansSQLite asks SQLite for the plan of every money-path
// statement (EXPLAIN QUERY PLAN, on a database migrated by pay/sqlite)
// and fails on any that scans a table, or an index other than a backlog's
// partial index: such a statement costs more with every payment kept.
// The foreign key checks are in the plan: an insert into payments shows
// "SCAN idempotency_keys" when idempotency_keys(payment_id) has no index.
func TestMoneyPathPlansSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.db")
	cfg := sqlite.DefaultConfig()
	cfg.Path = path
	s, err := sqlite.OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("sqlite.OpenConfig: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	stmts := sqlstore.MoneyPathStatements(sqldb.SQLite{})
	for _, name := range sortedKeys(stmts) {
		query := stmts[name]
		rows, err := db.Query("EXPLAIN QUERY PLAN "+query, make([]any, params(query))...)
		if err != nil {
			t.Errorf("%s: EXPLAIN QUERY PLAN: %v", name, err)
			continue
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		t.Logf("%s: %s", name, strings.Join(plan, " | "))
		for _, line := range plan {
			if m := sqliteScan.FindStringSubmatch(line); m != nil && !slices.Contains(partialScans, m[2]) {
				t.Errorf("%s scans %s (%q): its cost grows with the table\n%s", name, m[1], line, query)
			}
		}
	}
}

// TestMoneyPathPlansPostgres asks PostgreSQL for the generic plan of
// every money-path statement (PREPARE, then EXPLAIN EXECUTE with
// plan_cache_mode force_generic_plan, so that no parameter value shapes
// the plan) with sequential scans disabled, so that a Seq Scan left in a
// plan means no index could serve it, and fails on any. It needs
// STAMPEDE_POSTGRES_URL and works in a schema of its own.
func TestMoneyPathPlansPostgres(t *testing.T) {
	url := testenv.URL(t, testenv.PostgresURL)
	ctx := context.Background()
	schema := fmt.Sprintf("stampede_plan_%016x", rand.Uint64())
	cfg := postgres.DefaultConfig()
	cfg.URL, cfg.Schema = url, schema
	s, err := postgres.OpenConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("postgres.OpenConfig: %v", err)
	}
	s.Close()
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.RuntimeParams["search_path"] = schema
	c, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		c.Close(ctx)
	})
	if _, err := c.Exec(ctx, `SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	stmts := sqlstore.MoneyPathStatements(sqldb.Postgres{})
	for i, name := range sortedKeys(stmts) {
		query := stmts[name]
		ps := fmt.Sprintf("plan_%d", i)
		if _, err := c.Exec(ctx, "PREPARE "+ps+" AS "+query); err != nil {
			t.Errorf("%s: PREPARE: %v", name, err)
			continue
		}
		args := ""
		if n := params(query); n > 0 {
			args = "(" + strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ") + ")"
		}
		var doc []struct {
			Plan pgPlan `json:"Plan"`
		}
		var raw []byte
		if err := c.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+ps+args).Scan(&raw); err != nil {
			t.Errorf("%s: EXPLAIN: %v", name, err)
			continue
		}
		if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
			t.Fatalf("%s: EXPLAIN: %v: %s", name, err, raw)
		}
		t.Logf("%s: %s", name, doc[0].Plan)
		for _, bad := range doc[0].Plan.scans() {
			t.Errorf("%s: %s: its cost grows with the table\n%s", name, bad, query)
		}
	}
}

// pgPlan is a node of a PostgreSQL plan (EXPLAIN (FORMAT JSON)).
type pgPlan struct {
	NodeType  string   `json:"Node Type"`
	Relation  string   `json:"Relation Name"`
	Index     string   `json:"Index Name"`
	IndexCond string   `json:"Index Cond"`
	Plans     []pgPlan `json:"Plans"`
}

// scans returns the nodes of p that read a whole table, or a whole index
// (an index scan without an index condition) other than a backlog's
// partial index.
func (p pgPlan) scans() []string {
	var out []string
	switch {
	case p.NodeType == "Seq Scan":
		out = append(out, "Seq Scan on "+p.Relation)
	case strings.Contains(p.NodeType, "Index") && p.IndexCond == "" && !slices.Contains(partialScans, p.Index):
		out = append(out, p.NodeType+" on "+p.Index+" without an index condition")
	}
	for _, c := range p.Plans {
		out = append(out, c.scans()...)
	}
	return out
}

// String renders p on one line: each node, its index and condition.
func (p pgPlan) String() string {
	s := p.NodeType
	if p.Index != "" {
		s += " using " + p.Index
	} else if p.Relation != "" {
		s += " on " + p.Relation
	}
	if p.IndexCond != "" {
		s += " (" + p.IndexCond + ")"
	}
	for _, c := range p.Plans {
		s += " > " + c.String()
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
