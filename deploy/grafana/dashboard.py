"""Writes deploy/grafana/tfo-trace.json, the Grafana dashboard of `tfo-trace export`'s
metrics (docs/export.md), with Grafana Labs' grafana-foundation-sdk: builders generated
from Grafana's own dashboard schema, so every field is one Grafana reads. Run it with
`cargo xtask grafana` (which installs the pinned SDK); tests/integration/dashboard.rs
checks that the committed JSON is what this makes, and has a real Prometheus answer
every panel's query while the lab stalls toward one destination.

The queries use the exporter's own series, not the recording rules of
deploy/prometheus, so the dashboard works without them. Template variables: the
Prometheus data source, the scrape job(s), the exporter instance(s), and the destination
(all by default, which also matches series without a destination label: an exporter run
without --top-destinations).
"""

import json
import sys

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
    VariableSort,
)

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# The series of the hosts, jobs and destinations the variables pick.
HOSTS = 'job=~"$job", instance=~"$instance"'
CLIENT = HOSTS + ', role="client", destination=~"$destination"'
WHERE = HOSTS + ', destination=~"$destination"'
RATE = "[$__rate_interval]"


def query(ref_id, expr, legend):
    return (
        prometheus.Dataquery()
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .expr(expr)
        .legend_format(legend)
        .range()
    )


def series(panel_id, title, description, unit, targets, width=12):
    """A time series panel: `targets` are (expr, legend) pairs, A, B, ... in order."""
    panel = (
        timeseries.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(8)
        .legend(common.VizLegendOptions().show_legend(True).display_mode(common_models.LegendDisplayMode.TABLE).placement(common_models.LegendPlacement.BOTTOM).calcs(["mean", "max"]))
    )
    for ref_id, (expr, legend) in zip("ABCDEFGH", targets):
        panel.with_target(query(ref_id, expr, legend))
    return panel


def variable(name, label, query_text, all_value=None):
    v = (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query_text)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
    )
    if all_value is not None:
        v.all_value(all_value)
    return v


def build():
    # One outcome per connection: all but those that end none (Outcome::ends_connection).
    ends = 'outcome!~"cookie_received|active_disabled|synack_retransmitted"'
    connections = f"sum by (instance, destination) (rate(tfo_trace_connections_total{{{CLIENT}, {ends}}}{RATE}))"

    def or_zero(expr):
        """`expr` per destination, 0 for a destination that has none of its series: a
        destination's series exist from its first such outcome, so one that only stalls
        has no `accepted` series, and would show no data instead of 0."""
        return f"(\n  {expr}\nor\n  {connections} * 0\n)"

    accepted = or_zero(f'sum by (instance, destination) (rate(tfo_trace_connections_total{{{CLIENT}, outcome="accepted"}}{RATE}))')
    tried = f'sum by (instance, destination) (rate(tfo_trace_connections_total{{{CLIENT}, outcome=~"accepted|data_not_acked|syn_retransmitted"}}{RATE}))'
    stalls = or_zero(f'sum by (instance, destination) (rate(tfo_trace_connections_total{{{CLIENT}, outcome="syn_retransmitted"}}{RATE}))')
    lost = or_zero(f"sum by (instance, destination) (rate(tfo_trace_stall_seconds_total{{{WHERE}}}{RATE}))")
    saved = or_zero(f"sum by (instance, destination) (rate(tfo_trace_saved_seconds_total{{{WHERE}}}{RATE}))")
    per_destination = "{{instance}} {{destination}}"
    board = (
        dashboard.Dashboard("tfo-trace: TCP Fast Open")
        .uid("tfo-trace")
        .description("TCP Fast Open outcomes from tfo-trace export: stalls and time lost per destination, acceptance, refusals, what TFO saved against what it cost, and the exporter's own health.")
        .tags(["tfo-trace", "tcp", "ebpf"])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .link(dashboard.DashboardLink("docs/alerts.md: what each alert means").type("link").url("https://tfo-trace.invalid/docs/alerts.md").target_blank(True))
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(variable("job", "Job", "label_values(tfo_trace_build_info, job)"))
        .with_variable(variable("instance", "Exporter", 'label_values(tfo_trace_build_info{job=~"$job"}, instance)'))
        .with_variable(
            variable(
                "destination",
                "Destination",
                'label_values(tfo_trace_connections_total{job=~"$job", instance=~"$instance", role="client"}, destination)',
                # All: also the series with no destination label (no --top-destinations).
                all_value=".*",
            )
        )
        .with_row(dashboard.Row("Client connections, per destination").id(100))
        .with_panel(
            series(
                1,
                "Stalls per second",
                "TFO connections whose SYN timed out and went again as a plain SYN (outcome syn_retransmitted): each waited the kernel's initial SYN timeout, about 1 s. `tfo-trace stalls` on the host names each one and its cause.",
                "ops",
                [(stalls, per_destination)],
            )
        )
        .with_panel(
            series(
                2,
                "Time lost to stalls",
                "Seconds the stalled connections lost to SYN timeouts, per second (tfo_trace_stall_seconds_total): 1 means one connection somewhere is always waiting.",
                "s",
                [(lost, per_destination)],
            )
        )
        .with_panel(
            series(
                3,
                "Share of connections that stalled",
                "Stalls out of every client TFO connection (one outcome each). The alert TFOSynDataDropped fires from a tenth.",
                "percentunit",
                [(f"{stalls}\n/\n({connections} > 0)", per_destination)],
            )
        )
        .with_panel(
            series(
                4,
                "SYN-data acceptance",
                "Of the TFO SYNs sent with a cookie (or a cookie request that timed out), the share whose data the server accepted. Below 1: the server refused the cookie (data_not_acked) or the SYN-data was lost (syn_retransmitted).",
                "percentunit",
                [(f"{accepted}\n/\n({tried} > 0)", per_destination)],
            )
        )
        .with_panel(
            series(
                5,
                "Refused SYN-data by cause",
                "SYN-data the server did not take, by what its SYN-ACK said: new_cookie (the cookie was refused: a key change, servers without a shared key), no_tfo_option (no TFO there, a full TFO queue, syncookies, or the option stripped on the path), same_cookie, unknown. Counted from events: short by the events lost.",
                "ops",
                [
                    (
                        # Every cause exists at 0 from the start per host, not per destination.
                        f"sum by (instance, cause) (rate(tfo_trace_syn_data_refused_total{{{WHERE}}}{RATE}))\n"
                        f"or\nsum by (instance, cause) (rate(tfo_trace_syn_data_refused_total{{{HOSTS}}}{RATE})) * 0",
                        "{{instance}} {{cause}}",
                    )
                ],
            )
        )
        .with_panel(
            series(
                6,
                "The balance: time saved less time lost",
                "What accepted SYN-data saved (each connection's SYN to SYN-ACK round trip), what stalls lost, and the difference. Below zero, TFO costs more than it saves toward that destination (the alert TFOCostsMoreThanItSaves).",
                "s",
                [
                    (saved, "saved {{instance}} {{destination}}"),
                    (lost, "lost {{instance}} {{destination}}"),
                    (f"{saved}\n-\n{lost}", "net {{instance}} {{destination}}"),
                ],
            )
        )
        .with_panel(
            series(
                7,
                "Client connections by outcome",
                "Every client TFO connection, by how it ended (docs/outcomes.md).",
                "ops",
                [
                    (
                        f"sum by (instance, outcome) (rate(tfo_trace_connections_total{{{CLIENT}}}{RATE}))",
                        "{{instance}} {{outcome}}",
                    )
                ],
            )
        )
        .with_panel(
            series(
                8,
                "Handshake time, 99th percentile",
                "SYN to established, per role: the 1 s SYN timeout has its own bucket, so a stalling destination shows as a p99 near 1 s.",
                "s",
                [
                    (
                        f'histogram_quantile(0.99, sum by (instance, role, le) (rate(tfo_trace_handshake_seconds_bucket{{{HOSTS}}}{RATE})))',
                        "{{instance}} {{role}}",
                    )
                ],
            )
        )
        .with_row(dashboard.Row("Counted by the kernel, and the exporter's health").id(101))
        .with_panel(
            series(
                9,
                "Outcomes counted by the namespaces' own counters",
                "Outcomes no hook of the running backend sees (on the tracepoint backends: a server's cookie requests, refused cookies, a full TFO queue, a paused client), counted from each network namespace's own counters (source=\"kernel_counter\"): per host and outcome, since a namespace's counter names no destination. Empty where the backend's hooks see every outcome (fentry, kprobe).",
                "ops",
                [
                    (
                        f'sum by (instance, role, outcome) (rate(tfo_trace_connections_total{{{HOSTS}, source="kernel_counter"}}{RATE}))',
                        "{{instance}} {{role}} {{outcome}}",
                    )
                ],
            )
        )
        .with_panel(
            series(
                10,
                "Namespaces behind the kernel counts",
                "The network namespaces whose counters back the panel beside: read (or unnamed: read through a process this user may not name); an unreadable one (no process in it to read through) is missing from those counts.",
                "short",
                [
                    (
                        f"sum by (instance, state) (tfo_trace_kernel_counted_namespaces{{{HOSTS}}})",
                        "{{instance}} {{state}}",
                    )
                ],
            )
        )
        .with_panel(
            series(
                11,
                "Events lost, and what makes the counts short",
                "Events the ring buffer could not take (the counts stay exact; per-destination series count them under other), program runs the kernel skipped and outcomes it could not count (connections_total is short by these), connects it could not follow. All 0 on a healthy host (the alerts TFOExporterLosingEvents, TFOExporterMissingHookRuns).",
                "ops",
                [
                    (f"sum by (instance) (rate(tfo_trace_events_lost_total{{{HOSTS}}}{RATE}))", "events lost {{instance}}"),
                    (f"sum by (instance) (rate(tfo_trace_hook_runs_missed_total{{{HOSTS}}}{RATE}))", "hook runs missed {{instance}}"),
                    (f"sum by (instance) (rate(tfo_trace_outcomes_uncounted_total{{{HOSTS}}}{RATE}))", "outcomes uncounted {{instance}}"),
                    (f"sum by (instance) (rate(tfo_trace_connects_unfollowed_total{{{HOSTS}}}{RATE}))", "connects unfollowed {{instance}}"),
                ],
            )
        )
        .with_panel(
            stat.Panel()
            .id(12)
            .title("Exporters up")
            .description("Exporters Prometheus scraped at the last scrape, of those the variables pick: 0 means no TFO alert can fire for that host (TFOExporterDown).")
            .datasource(DATASOURCE)
            .span(12)
            .height(8)
            .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
            .graph_mode(common_models.BigValueGraphMode.NONE)
            .color_mode(common_models.BigValueColorMode.BACKGROUND)
            .thresholds(
                dashboard.ThresholdsConfig()
                .mode(ThresholdsMode.ABSOLUTE)
                .steps([Threshold(value=None, color="red"), Threshold(value=1, color="green")])
            )
            .with_target(query("A", f"up{{{HOSTS}}}", "{{instance}}"))
        )
    )
    return board.build()


def main():
    text = json.dumps(build(), cls=JSONEncoder, sort_keys=True, indent=2)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
