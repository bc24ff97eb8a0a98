"""The gpulease Grafana dashboards, built with ``grafana-foundation-sdk`` and written as JSON to
``deploy/grafana/`` (the files a user imports; docs/grafana.md says what each panel shows).

    python scripts/grafana_dashboards.py            # (re)write deploy/grafana/*.json
    python scripts/grafana_dashboards.py --check    # exit 1 when a committed file is stale
    python scripts/grafana_dashboards.py --out DIR  # write them elsewhere

Three dashboards, all on one Prometheus data source chosen by the ``datasource`` variable:
fleet overview (``gpulease-fleet``), one cluster (``gpulease-cluster``, variable ``cluster``) and
one managed job (``gpulease-job``, variable ``job_id``). Every query reads only the metric names
of docs/metrics.md; tests/deploy/test_dashboards_e2e.py evaluates each one against a real
Prometheus scraping a real server. Owns no state.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as viz
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as viz_model
from grafana_foundation_sdk.models import dashboard as model

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "deploy" / "grafana"
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
RANGE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    """One PromQL expression of a panel and its legend."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Chart:
    """A panel: ``kind`` ``timeseries`` or ``stat``, its queries, unit and width (of 24)."""

    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 12
    max: float | None = None


def _panel(chart: Chart, panel_id: int) -> timeseries.Panel | stat.Panel:
    panel: timeseries.Panel | stat.Panel
    if chart.kind == "timeseries":
        panel = (
            timeseries.Panel()
            .legend(
                viz.VizLegendOptions()
                .show_legend(True)
                .placement(viz_model.LegendPlacement.BOTTOM)
                .display_mode(viz_model.LegendDisplayMode.LIST)
            )
            .tooltip(viz.VizTooltipOptions().mode(viz_model.TooltipDisplayMode.MULTI))
        )
    else:
        panel = (
            stat.Panel()
            .graph_mode(viz_model.BigValueGraphMode.AREA)
            .reduce_options(viz.ReduceDataOptions().values(False).calcs(["lastNotNull"]))
        )
    panel.id(panel_id).title(chart.title).description(chart.description).datasource(DS).unit(
        chart.unit
    )
    panel.span(chart.width).height(4 if chart.kind == "stat" else 8).min(0)
    if chart.max is not None:
        panel.max(chart.max)
    for i, query in enumerate(chart.queries):
        target = prometheus.Dataquery().expr(query.expr).ref_id(chr(ord("A") + i))
        panel.with_target(target.legend_format(query.legend or "__auto").datasource(DS))
    return panel


def _datasource_variable() -> db.DatasourceVariable:
    return db.DatasourceVariable("datasource").label("Data source").type("prometheus")


def _query_variable(name: str, label: str, metric: str) -> db.QueryVariable:
    query = f"label_values({metric}, {name})"
    return (
        db.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(query)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )


def _dashboard(uid: str, title: str, description: str, rows: list[tuple[str, list[Chart]]],
               variables: list[Any]) -> dict[str, Any]:  # fmt: skip
    board = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["gpulease"])
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
    )
    for variable in [_datasource_variable(), *variables]:
        board.with_variable(variable)
    panel_id = 0
    for row, charts in rows:
        panel_id += 1
        board.with_row(db.Row(row).id(panel_id))
        for chart in charts:
            panel_id += 1
            board.with_panel(_panel(chart, panel_id))
    encoded: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


Rows = list[tuple[str, list[Chart]]]
PERCENT = 100.0


def fleet_rows() -> Rows:
    return [
        ("Now", [
            Chart("Clusters running", "Clusters in status running.",
                  (Query('sum(gpulease_clusters{status="running"})'),), kind="stat", width=4),
            Chart("Nodes ready", "Nodes whose agent answers.",
                  (Query('sum(gpulease_nodes{status="ready"})'),), kind="stat", width=4),
            Chart("Managed jobs running", "Managed jobs in status running.",
                  (Query('sum(gpulease_jobs{status="running"})'),), kind="stat", width=4),
            Chart("Fleet $/h", "What the fleet costs per hour now (the plans' prices).",
                  (Query("sum(gpulease_cluster_price_usd_per_hour)"),), "currencyUSD",
                  kind="stat", width=4),
            Chart("Mean GPU utilisation", "Over every reporting GPU of the fleet.",
                  (Query("avg(gpulease_gpu_utilization_percent)"),), "percent", kind="stat",
                  width=4, max=PERCENT),
            Chart("GPUs reporting", "GPUs whose node relays samples now.",
                  (Query("count(gpulease_gpu_utilization_percent)"),), kind="stat", width=4),
        ]),
        ("Clusters", [
            Chart("$/h per cluster", "Each cluster's price now.",
                  (Query("sum by (cluster) (gpulease_cluster_price_usd_per_hour)",
                         "{{cluster}}"),), "currencyUSD"),
            Chart("GPU utilisation per cluster", "Mean over the cluster's GPUs.",
                  (Query("avg by (cluster) (gpulease_gpu_utilization_percent)",
                         "{{cluster}}"),), "percent", max=PERCENT),
            Chart("Clusters by status", "Every cluster status, 0 included.",
                  (Query("sum by (status) (gpulease_clusters)", "{{status}}"),)),
            Chart("Nodes by state", "Every node state, 0 included.",
                  (Query("sum by (status) (gpulease_nodes)", "{{status}}"),)),
        ]),
        ("Control plane", [
            Chart("Control-plane events", "Launches, failovers, preemptions, recoveries and "
                  "restarts per window.",
                  (Query(f"increase(gpulease_launches_total[{RANGE}])", "launches"),
                   Query(f"increase(gpulease_failovers_total[{RANGE}])", "failovers"),
                   Query(f"increase(gpulease_preemptions_total[{RANGE}])", "preemptions"),
                   Query(f"increase(gpulease_job_recoveries_total[{RANGE}])", "recoveries"),
                   Query(f"increase(gpulease_job_restarts_total[{RANGE}])", "restarts"))),
            Chart("Reconcile pass, 95th percentile", "How long one pass of each loop takes.",
                  (Query("histogram_quantile(0.95, sum by (le, loop) "
                         f"(rate(gpulease_reconcile_pass_seconds_bucket[{RANGE}])))",
                         "{{loop}}"),), "s"),
            Chart("Managed jobs by status", "Every job status, 0 included.",
                  (Query("sum by (status) (gpulease_jobs)", "{{status}}"),)),
            Chart("Telemetry relay pass, 95th percentile",
                  "How long the server takes to pull, store and render the nodes' samples.",
                  (Query("histogram_quantile(0.95, sum by (le) "
                         f"(rate(gpulease_telemetry_relay_seconds_bucket[{RANGE}])))",
                         "relay"),), "s"),
        ]),
    ]  # fmt: skip


def _gpu(metric: str) -> str:
    return f'{metric}{{cluster="$cluster"}}'


GPU = "node {{node_rank}} gpu {{gpu}}"
NODE = "node {{node_rank}}"


def cluster_rows() -> Rows:
    node = 'cluster="$cluster"'
    return [
        ("Now", [
            Chart("$/h", "The cluster's price now.",
                  (Query(f"sum(gpulease_cluster_price_usd_per_hour{{{node}}})"),),
                  "currencyUSD", kind="stat", width=6),
            Chart("Mean GPU utilisation", "Over the cluster's GPUs.",
                  (Query(f"avg({_gpu('gpulease_gpu_utilization_percent')})"),), "percent",
                  kind="stat", width=6, max=PERCENT),
            Chart("Throttled GPUs", "GPUs with any clock-throttle reason active now.",
                  (Query(f"count(max by (node_rank, gpu) ({_gpu('gpulease_gpu_throttled')}))"
                         " or vector(0)"),), kind="stat", width=6),
            Chart("Newest sample age", "Seconds since each node's last relayed sample.",
                  (Query(f"time() - gpulease_node_last_sample_timestamp_seconds{{{node}}}",
                         NODE),), "s", kind="stat", width=6),
        ]),
        ("GPUs", [
            Chart("GPU utilisation", "NVML's utilisation per GPU.",
                  (Query(_gpu("gpulease_gpu_utilization_percent"), GPU),), "percent",
                  max=PERCENT),
            Chart("GPU memory used", "Device memory in use per GPU, and the total.",
                  (Query(_gpu("gpulease_gpu_memory_used_bytes"), GPU),
                   Query(f"max({_gpu('gpulease_gpu_memory_total_bytes')})", "total")),
                  "bytes"),
            Chart("GPU power", "Power draw per GPU, and the lowest enforced limit.",
                  (Query(_gpu("gpulease_gpu_power_watts"), GPU),
                   Query(f"min({_gpu('gpulease_gpu_power_limit_watts')})", "limit")),
                  "watt"),
            Chart("GPU temperature", "Core temperature per GPU.",
                  (Query(_gpu("gpulease_gpu_temperature_celsius"), GPU),), "celsius"),
            Chart("SM clock", "Streaming-multiprocessor clock per GPU.",
                  (Query(_gpu("gpulease_gpu_sm_clock_hertz"), GPU),), "hertz"),
            Chart("XID and ECC errors", "Errors per GPU since its agent started sampling.",
                  (Query(f"sum by (node_rank, gpu) ({_gpu('gpulease_gpu_xid_errors_total')})",
                         f"xid {GPU}"),
                   Query(f"sum by (node_rank, gpu, kind) "
                         f"({_gpu('gpulease_gpu_ecc_errors_total')})",
                         f"ecc {{{{kind}}}} {GPU}"))),
        ]),
        ("Hosts", [
            Chart("Host CPU", "All cores of each node.",
                  (Query(f"gpulease_node_cpu_percent{{{node}}}", NODE),), "percent",
                  max=PERCENT),
            Chart("Host memory", "Memory in use per node.",
                  (Query(f"gpulease_node_memory_used_bytes{{{node}}}", NODE),), "bytes"),
            Chart("Network", "Bytes per second in and out of each node.",
                  (Query(f"gpulease_node_network_receive_bytes_per_second{{{node}}}",
                         f"{NODE} in"),
                   Query(f"gpulease_node_network_transmit_bytes_per_second{{{node}}}",
                         f"{NODE} out")), "Bps"),
            Chart("Disk", "Bytes per second read and written on each node.",
                  (Query(f"gpulease_node_disk_read_bytes_per_second{{{node}}}",
                         f"{NODE} read"),
                   Query(f"gpulease_node_disk_write_bytes_per_second{{{node}}}",
                         f"{NODE} write")), "Bps"),
            Chart("Peer round trip", "TCP connect time from each node to the others' agents "
                  "over the private network.",
                  (Query(f"gpulease_node_peer_rtt_seconds{{{node}}}",
                         "node {{node_rank}} → {{peer_rank}}"),), "s"),
            Chart("GPU metrics source", "1 per node that reports GPUs (nvml or fake).",
                  (Query(f"gpulease_node_gpu_metrics_available{{{node}}}",
                         f"{NODE} {{{{source}}}}"),)),
        ]),
    ]  # fmt: skip


def job_rows() -> Rows:
    job = 'job_id="$job_id"'
    return [
        ("Now", [
            Chart("$/h", "The job's current attempt cluster's price.",
                  (Query(f"sum(gpulease_job_price_usd_per_hour{{{job}}})"),), "currencyUSD",
                  kind="stat", width=6),
            Chart("Step", "The training step now (highest over the nodes).",
                  (Query(f"max(gpulease_train_step{{{job}}})"),), kind="stat", width=6),
            Chart("Attempts in range", "Attempt clusters the job ran on in the time range: "
                  "1 + its recoveries and restarts there.",
                  (Query("count(count by (cluster) "
                         f"(count_over_time(gpulease_job_price_usd_per_hour{{{job}}}[$__range])))"),),
                  kind="stat", width=6),
            Chart("Checkpoint age", "Seconds since the last checkpoint was saved.",
                  (Query(f"min(gpulease_train_checkpoint_age_seconds{{{job}}})"),), "s",
                  kind="stat", width=6),
        ]),
        ("Training", [
            Chart("Throughput", "Samples and tokens per second, summed over the nodes.",
                  (Query(f"sum(gpulease_train_samples_per_second{{{job}}})", "samples/s"),
                   Query(f"sum(gpulease_train_tokens_per_second{{{job}}})", "tokens/s"))),
            Chart("MFU", "Model FLOPs utilisation per node (0–1).",
                  (Query(f"gpulease_train_mfu_ratio{{{job}}}", NODE),), "percentunit", max=1),
            Chart("Data-wait share", "Share of step time spent waiting for the input "
                  "pipeline, per node.",
                  (Query(f"gpulease_train_data_wait_ratio{{{job}}}", NODE),), "percentunit",
                  max=1),
            Chart("Step time", "Mean time of one step per node.",
                  (Query(f"gpulease_train_step_seconds{{{job}}}", NODE),), "s"),
            Chart("Steps and checkpoints", "The current step and the last checkpoint's step.",
                  (Query(f"max(gpulease_train_step{{{job}}})", "step"),
                   Query(f"max(gpulease_train_checkpoint_step{{{job}}})", "checkpoint"))),
            Chart("GPU utilisation", "Mean over each node's GPUs.",
                  (Query(f"avg by (node_rank) (gpulease_gpu_utilization_percent{{{job}}})",
                         NODE),), "percent", max=PERCENT),
        ]),
        ("Cost and recoveries", [
            Chart("$/h by attempt cluster", "The job's price; a new line is a new attempt.",
                  (Query(f"sum by (cluster) (gpulease_job_price_usd_per_hour{{{job}}})",
                         "{{cluster}}"),), "currencyUSD"),
            Chart("Checkpoint sync age", "Age of the last checkpoint the agents synced to the "
                  "job's store, and the alert line (3 × the sync interval).",
                  (Query(f"gpulease_checkpoint_sync_age_seconds{{{job}}}", "sync age"),
                   Query(f"3 * gpulease_job_checkpoint_interval_seconds{{{job}}}",
                         "alert above (3 × interval)")), "s"),
            Chart("Recoveries and restarts (fleet)", "Every managed job's recoveries after "
                  "preemptions and restarts after failures, per window.",
                  (Query(f"increase(gpulease_job_recoveries_total[{RANGE}])", "recoveries"),
                   Query(f"increase(gpulease_job_restarts_total[{RANGE}])", "restarts"))),
        ]),
    ]  # fmt: skip


def dashboards() -> dict[str, dict[str, Any]]:
    """File name → dashboard JSON (as Grafana's import takes it)."""
    cluster = _query_variable("cluster", "Cluster", "gpulease_cluster_price_usd_per_hour")
    job = _query_variable("job_id", "Managed job", "gpulease_job_price_usd_per_hour")
    return {
        "fleet.json": _dashboard(
            "gpulease-fleet", "gpulease / Fleet",
            "Every cluster and managed job of one gpulease server: counts, $/h, GPU use.",
            fleet_rows(), [],
        ),
        "cluster.json": _dashboard(
            "gpulease-cluster", "gpulease / Cluster",
            "One cluster's nodes: per-GPU utilisation, memory, power, temperature; the "
            "hosts' CPU, memory, disk and network; the round trip between its nodes.",
            cluster_rows(), [cluster],
        ),
        "job.json": _dashboard(
            "gpulease-job", "gpulease / Managed job",
            "One managed job under gpulease.train: throughput, MFU, data-wait share, "
            "checkpoints, attempts and $/h.",
            job_rows(), [job],
        ),
    }  # fmt: skip


def render(board: dict[str, Any]) -> str:
    """The file's text: stable key order, two-space indent, final newline."""
    return json.dumps(board, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder (default {OUT})")
    args = parser.parse_args(argv)
    stale = []
    for name, board in dashboards().items():
        path: Path = args.out / name
        text = render(board)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    if stale:
        print(f"stale in {args.out}: {', '.join(stale)} "
              "(run python scripts/grafana_dashboards.py)", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
