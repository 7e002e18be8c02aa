package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-lab/stampede/waitroom"
)

// readPayMetrics reads pay's payments counter (stampede_pay_payments_total
// by the status the first call left each payment in) from its /metrics
// every second until ctx ends, and hands the room's service the totals
// for its adaptive outflow (waitroom.Service.ObservePayments). A failed
// read is logged once a minute at most and skipped.
func readPayMetrics(ctx context.Context, url string, svc *waitroom.Service, room string, log *slog.Logger) {
	hc := &http.Client{Timeout: 2 * time.Second}
	var warned time.Time
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		total, unknown, err := scrapePayments(ctx, hc, url)
		if err == nil {
			svc.ObservePayments(room, total, unknown)
		} else if ctx.Err() == nil && time.Since(warned) > time.Minute {
			warned = time.Now()
			log.Warn("gate: reading pay's metrics failed", "url", url, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapePayments sums stampede_pay_payments_total over its statuses and
// for status UNKNOWN.
func scrapePayments(ctx context.Context, hc *http.Client, url string) (total, unknown int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	return parsePayments(io.LimitReader(resp.Body, 8<<20))
}

// parsePayments reads the Prometheus text format.
func parsePayments(r io.Reader) (total, unknown int64, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "stampede_pay_payments_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, perr := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || perr != nil {
			continue
		}
		total += int64(v)
		if strings.Contains(line[:i], `status="UNKNOWN"`) {
			unknown += int64(v)
		}
	}
	return total, unknown, sc.Err()
}
