#!/usr/bin/env python3
"""Writes deploy/grafana-dashboard.json, the Grafana dashboard of the daemon's
metrics (docs/metrics.md), to standard output:

    python scripts/grafana_dashboard.py > deploy/grafana-dashboard.json

internal/session/metrics_test.go checks that every query names series and
labels the daemon exports. Import the JSON in Grafana (Dashboards > Import)
and pick the Prometheus data source that scrapes the daemons.
"""
import json
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", instance=~"$instance"'
panels = []
def panel(title, desc, targets, unit, x, y, w=12, h=8, stack=False, maxv=None):
    p = {
        "type": "timeseries", "title": title, "description": desc, "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, "custom": {"fillOpacity": 10, "stacking": {"mode": "normal" if stack else "none"}}}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [{"datasource": DS, "expr": e, "legendFormat": l, "refId": chr(65 + i)} for i, (e, l) in enumerate(targets)],
    }
    if maxv is not None:
        p["fieldConfig"]["defaults"]["max"] = maxv
    p["id"] = len(panels) + 1
    panels.append(p)
R = "$__rate_interval"
panel("Trainer wait for the next batch",
      "How long clients waited in next(), as they measured it (dataloaderd_client_wait_seconds). Near zero: the daemon is ahead of the trainer.",
      [(f'histogram_quantile(0.5, sum by (le, instance) (rate(dataloaderd_client_wait_seconds_bucket{{{SEL}}}[{R}])))', "p50 {{instance}}"),
       (f'histogram_quantile(0.99, sum by (le, instance) (rate(dataloaderd_client_wait_seconds_bucket{{{SEL}}}[{R}])))', "p99 {{instance}}")],
      "s", 0, 0)
panel("Prefetch depth (ready slots)",
      "Batches produced and not yet taken, per rank. 0 while training means the daemon is the bottleneck.",
      [(f'min by (instance) (dataloaderd_ready_slots{{{SEL}}})', "min {{instance}}"),
       (f'dataloaderd_ready_slots{{{SEL}}}', "{{training_job}} rank {{dp_rank}}")],
      "short", 12, 0)
panel("Tokens served per second, by dataset",
      "Prefetched batches included; lines x (seq_len+1).",
      [(f'sum by (dataset) (rate(dataloaderd_tokens_served_total{{{SEL}}}[{R}]))', "{{dataset}}")],
      "short", 0, 8, stack=True)
panel("Realized mixture (share of lines)",
      "Each dataset's share of the lines served; compare with the configured weights.",
      [(f'sum by (dataset) (rate(dataloaderd_lines_served_total{{{SEL}}}[{R}])) / scalar(sum(rate(dataloaderd_lines_served_total{{{SEL}}}[{R}])))', "{{dataset}}")],
      "percentunit", 12, 8, stack=True, maxv=1)
panel("Sessions and batches",
      "Open sessions (one per job and data-parallel rank) and batches written per second.",
      [(f'sum by (instance) (dataloaderd_sessions{{{SEL}}})', "sessions {{instance}}"),
       (f'sum by (instance) (rate(dataloaderd_batches_served_total{{{SEL}}}[{R}]))', "batches/s {{instance}}")],
      "short", 0, 16, w=8)
panel("Memory held",
      "Host ring memory (shared memory, process memory or pinned staging), GPU memory of device rings, and tokenized text in the token cache.",
      [(f'sum by (instance) (dataloaderd_ring_bytes{{{SEL}}})', "host rings {{instance}}"),
       (f'sum by (instance) (dataloaderd_device_ring_bytes{{{SEL}}})', "device rings {{instance}}"),
       (f'sum by (instance) (dataloaderd_token_cache_bytes{{{SEL}}})', "token cache {{instance}}")],
      "bytes", 8, 16, w=8)
panel("Errors per second, by kind",
      "Errors returned to clients by gRPC code, and producer for a batch producer that stopped on an error.",
      [(f'sum by (kind) (rate(dataloaderd_errors_total{{{SEL}}}[{R}]))', "{{kind}}")],
      "short", 16, 16, w=8)
panel("State save time",
      "Time to write one rank's state file (encode, write, fsync, rename): p50 and p99.",
      [(f'histogram_quantile(0.5, sum by (le) (rate(dataloaderd_state_save_seconds_bucket{{{SEL}}}[{R}])))', "p50"),
       (f'histogram_quantile(0.99, sum by (le) (rate(dataloaderd_state_save_seconds_bucket{{{SEL}}}[{R}])))', "p99")],
      "s", 0, 24, w=6)
panel("State size",
      "Mean size of the rank states saved; it does not grow with data, buffers or steps.",
      [(f'sum(rate(dataloaderd_state_size_bytes_sum{{{SEL}}}[{R}])) / sum(rate(dataloaderd_state_size_bytes_count{{{SEL}}}[{R}]))', "mean")],
      "bytes", 6, 24, w=6)
panel("Token cache hit ratio",
      "Reads of tokenized text units found in the cache. Misses growing faster than units are consumed: raise --token-cache-mb.",
      [(f'sum by (instance) (rate(dataloaderd_token_cache_hits_total{{{SEL}}}[{R}])) / (sum by (instance) (rate(dataloaderd_token_cache_hits_total{{{SEL}}}[{R}])) + sum by (instance) (rate(dataloaderd_token_cache_misses_total{{{SEL}}}[{R}])))', "{{instance}}")],
      "percentunit", 12, 24, w=6, maxv=1)
panel("Bad records skipped per second",
      "Text records skipped under on_bad_record: skip, by dataset (each counted once).",
      [(f'sum by (dataset) (rate(dataloaderd_text_records_skipped_total{{{SEL}}}[{R}]))', "{{dataset}}")],
      "short", 18, 24, w=6)
panel("Daemon CPU",
      "CPU cores the daemon process uses (reading, packing, tokenizing).",
      [(f'rate(process_cpu_seconds_total{{{SEL}}}[{R}])', "{{instance}}")],
      "short", 0, 32)
panel("Daemon resident memory",
      "Resident memory of the daemon process (the pages of shared-memory rings it has touched included).",
      [(f'process_resident_memory_bytes{{{SEL}}}', "{{instance}}")],
      "bytes", 12, 32)
panel("Copy of a batch to its device slot (cuda)",
      "Time a cuda session's producer took to copy one batch to the GPU and see it complete: p50 and p99. Tens of us is normal; more, a busy or throttled GPU link.",
      [(f'histogram_quantile(0.5, sum by (le, instance) (rate(dataloaderd_device_copy_seconds_bucket{{{SEL}}}[{R}])))', "p50 {{instance}}"),
       (f'histogram_quantile(0.99, sum by (le, instance) (rate(dataloaderd_device_copy_seconds_bucket{{{SEL}}}[{R}])))', "p99 {{instance}}")],
      "s", 0, 40)
panel("Time each rank waited for data",
      "Fraction of time each rank's trainer waited in next() (dataloaderd_rank_wait_seconds_total): 0.2 means a fifth of the time. The alert DataloaderdRankWaiting fires above 0.1 for 5 minutes.",
      [(f'rate(dataloaderd_rank_wait_seconds_total{{{SEL}}}[{R}])', "{{training_job}} rank {{dp_rank}}")],
      "percentunit", 12, 40)
panel("Why ranks waited, by cause",
      "The same wait split by what the batches waited for took their time on (dataloaderd_rank_late_seconds_total): read, tokenize, object_storage, pack, device_copy, other. docs/metrics.md, 'Which rank waited, and why'.",
      [(f'sum by (training_job, cause) (rate(dataloaderd_rank_late_seconds_total{{{SEL}}}[{R}]))', "{{training_job}} {{cause}}")],
      "percentunit", 0, 48, w=24, stack=True)
dash = {
    "title": "dataloaderd",
    "uid": "dataloaderd",
    "description": "The dataloaderd daemons of a training job: whether trainers wait, prefetch depth, mixture, memory, errors. Metrics: docs/metrics.md.",
    "tags": ["dataloaderd", "training"],
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "time": {"from": "now-1h", "to": "now"},
    "refresh": "30s",
    "templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
        {"name": "job", "type": "query", "datasource": DS, "query": "label_values(dataloaderd_sessions, job)",
         "definition": "label_values(dataloaderd_sessions, job)", "refresh": 2, "includeAll": False, "label": "scrape job"},
        {"name": "instance", "type": "query", "datasource": DS, "query": 'label_values(dataloaderd_sessions{job=~"$job"}, instance)',
         "definition": 'label_values(dataloaderd_sessions{job=~"$job"}, instance)', "refresh": 2, "includeAll": True, "multi": True,
         "allValue": ".*", "label": "node"},
    ]},
    "panels": panels,
}
print(json.dumps(dash, indent=2))
