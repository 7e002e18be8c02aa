package sale

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
	"github.com/stampede-lab/stampede/waitroom/client"
)

// checkFairness exports the room's admission log through a gate, as an
// operator would (stampede room log), writes it to the run's directory
// (admissions.log) and checks it as stampede room verify does. It
// returns the report.
func (r *rig) checkFairness(ctx context.Context) (waitroom.VerifyReport, error) {
	cfg := client.DefaultConfig()
	cfg.BaseURL, cfg.AdminToken, cfg.Timeout = r.gateURLs[0], r.adminToken, 30*time.Second
	c, err := client.New(cfg)
	if err != nil {
		return waitroom.VerifyReport{}, err
	}
	var buf bytes.Buffer
	if _, err := c.AdmissionLog(ctx, r.room, &buf); err != nil {
		return waitroom.VerifyReport{}, fmt.Errorf("sale: exporting the admission log: %w", err)
	}
	_ = os.WriteFile(filepath.Join(r.dir, "admissions.log"), buf.Bytes(), 0o644)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if buf.Len() == 0 {
		lines = nil
	}
	return waitroom.VerifyLog(lines, waitroom.VerifyOptions{}), nil
}
