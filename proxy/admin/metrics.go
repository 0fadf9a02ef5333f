package admin

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/taskgate/taskgate/taskstore"
)

// maxToolSeries bounds the tool label of the oldest-task gauge: tool names
// come from clients' calls, so the oldest maxToolSeries tools get a series
// of their own and the rest are folded into tool="other".
const maxToolSeries = 50

// statsMaxAge is how long a scrape reuses the previous store read, so
// several scrapers (or a fast scrape interval) cost one read.
const statsMaxAge = 5 * time.Second

// statsTimeout bounds the store read of one scrape.
const statsTimeout = 3 * time.Second

var (
	tasksDesc = prometheus.NewDesc("taskgate_tasks",
		"Live (unexpired) tasks in the task store by status, across every replica sharing it.", []string{"status"}, nil)
	oldestDesc = prometheus.NewDesc("taskgate_task_oldest_running_age_seconds",
		"Age of the oldest working or input_required task, by tool (tools past the 50 oldest are folded into \"other\"); absent when none runs.",
		[]string{"tool"}, nil)
	statsUpDesc = prometheus.NewDesc("taskgate_task_stats_up",
		"1 when the last read of the task gauges from the task store succeeded, else 0 (the gauges are then absent).", nil, nil)
)

// Collector exports gauges computed from the store's AdminStats when
// Prometheus scrapes: tasks by status and the oldest running task's age
// per tool. Safe for concurrent use.
type Collector struct {
	store taskstore.Admin
	now   func() time.Time
	log   zerolog.Logger

	mu    sync.Mutex
	at    time.Time // when last read
	stats taskstore.AdminStats
	err   error
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector for store; now nil means time.Now.
func NewCollector(store taskstore.Admin, now func() time.Time, log zerolog.Logger) *Collector {
	if now == nil {
		now = time.Now
	}
	return &Collector{store: store, now: now, log: log}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- oldestDesc
	ch <- statsUpDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	now := c.now()
	if c.at.IsZero() || now.Sub(c.at) >= statsMaxAge || c.err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		c.stats, c.err = c.store.AdminStats(ctx)
		cancel()
		c.at = now
		if c.err != nil {
			c.log.Warn().Err(c.err).Msg("reading the task gauges from the store failed")
		}
	}
	st, err := c.stats, c.err
	c.mu.Unlock()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 1)
	for _, s := range statuses {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(st.ByStatus[s]), string(s))
	}
	type toolAge struct {
		tool string
		at   time.Time
	}
	ages := make([]toolAge, 0, len(st.OldestRunning))
	for tool, at := range st.OldestRunning {
		ages = append(ages, toolAge{tool, at})
	}
	sort.Slice(ages, func(i, j int) bool { return ages[i].at.Before(ages[j].at) })
	var other time.Time // the oldest of the folded tools; a tool named "other" is folded too
	named := 0
	for _, a := range ages {
		if named == maxToolSeries || a.tool == "other" {
			if other.IsZero() {
				other = a.at // ages is oldest first
			}
			continue
		}
		named++
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, max(now.Sub(a.at).Seconds(), 0), a.tool)
	}
	if !other.IsZero() {
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, max(now.Sub(other).Seconds(), 0), "other")
	}
}
