"""Runs every kube-gpu-extender benchmark and writes bench/RESULTS.md.

What it measures (details in each script's docstring):
- bench_extender.py: latency of gpu-extender's POST /filter and POST /prioritize
  as kube-scheduler calls them (sequential, loopback, keep-alive), with 100,
  1,000 and 5,000 candidate node names and 1,000 full Node objects;
- bench_classes.py: the same verbs for an OME pod with 8 AcceleratorClasses and
  50 ServingRuntimes loaded, next to the skeleton's figures (target: within 1.5x);
- bench_agent.py: CPU share and RSS of one gpu-agent sampling 8 fake GPUs every
  second and streaming to an extender;
- bench_reconnect.py: seconds until N gpu-agents stream again after the
  extender was down 20 s / 90 s (target: max backoff + 2 s), head-to-head with
  the agent's pre-fix channel options;
- bench_hostile_http.py: how long one scheduler request can hold the extender's
  event loop: cost per candidate name, full Nodes per MiB, the dearest bodies
  within the default limits (target: < 100 ms), one hostile quantity;
- bench_hostile_ingest.py: the extender's RSS before/after 100 made-up nodes send
  maximal reports over gRPC (with and without an inventory, and over the size
  bound), and what 50 streams that never read acks get processed;
- profile_extender.py (phases only): where the extender's time goes inside one
  5,000-name filter call, in-process, without HTTP;
- bench_scheduler.py: pods/s a real kube-scheduler binds at 1,000 nodes with no
  extender, do-nothing extenders (Python, Go) and gpu-extender (needs
  KUBEBUILDER_ASSETS; skipped with one line when it is unset);
- bench_ingest.py: 5,000 simulated agents against one extender: reports/s per core, the
  core share at 1 s, and filter/prioritize p99 with and without that load (issue 13);
- bench_baseline.py (with --baseline REV): filter/prioritize at 5,000 names against an
  earlier revision's extender, alternating in one run;
- bench_pod_resources.py (with the agent): the cost of one kubelet PodResources List per sample;
- bench_placement.py: placement quality on a simulated 500-node fleet, kube-scheduler
  alone against each node strategy of the real extender (issue 12's targets), and
  bench_placement_kube.py: a smaller run of the same fleet through a real kube-scheduler
  (needs KUBEBUILDER_ASSETS, like bench_scheduler);
- bench_burst.py: 300 one-GPU pods at once through a real kube-scheduler, how many land on GPUs
  already taken, per way the extender learns of bindings (issue 16; needs KUBEBUILDER_ASSETS);
- bench_ledger.py: the bound-pod ledger with 40,000 pods: memory, watch CPU, and filter/prioritize
  at 5,000 names with and without it (issue 16);
- bench_dra.py: DRA at fleet scale, 40,000 devices in ResourceSlices and 20,000 ResourceClaims:
  memory, watch CPU, and filter/prioritize at 5,000 names for a claim pod against a device-plugin
  pod (issue 24).
Then it prints a summary, checks the targets (filter p99 < 10 ms at 5,000
names; agent <= 1 % of one core and <= 48 MiB RSS) and (re)writes
bench/RESULTS.md, plus the raw figures in bench/out/results.json.

Run from the repo root: `./dev.sh bench` (= `.venv/bin/python bench/run_all.py`).
`--quick` is a smoke check (few iterations, short agent window) and does not
touch RESULTS.md unless `--results` is given. Exit status 1 when a benchmark
failed (a process died, an answer had the wrong shape); a missed target alone
does not fail the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_agent
import bench_baseline
import bench_burst
import bench_classes
import bench_dra
import bench_extender
import bench_floor
import bench_hostile_http
import bench_hostile_ingest
import bench_ledger
import bench_placement
import bench_placement_kube
import bench_reconnect
import bench_scheduler
import profile_extender
from benchlib import BENCH_DIR, OUT_DIR, REPO_ROOT, BenchError, exit_on_sigterm, machine_facts

RESULTS_MD = BENCH_DIR / "RESULTS.md"
TARGET_FILTER_P99_MS = 10.0
TARGET_SCENARIO = "names-5000"
BACKGROUND_WARN_CORES = 0.15


PLACEMENT_STALE_AFTER_S = 3.0  # bench_placement's default: dying agents go stale within the run


def _git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + (" (with uncommitted changes)" if dirty else "")


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def filter_target(ext: bench_extender.ExtenderBenchResult | None) -> tuple[float | None, bool | None]:
    if ext is None:
        return None, None
    for sc in ext.scenarios:
        if sc.name == TARGET_SCENARIO:
            p99 = next(v.p99_ms for v in sc.verbs if v.verb == "filter")
            return p99, p99 < TARGET_FILTER_P99_MS
    return None, None


def background_warning(
    ext: bench_extender.ExtenderBenchResult | None, agent: bench_agent.AgentBenchResult | None
) -> str:
    """A sentence when other processes used a noticeable share of the machine during the run."""
    loads = [sc.background_cores for sc in ext.scenarios] if ext else []
    if agent is not None:
        loads.append(agent.background_cores)
    worst = max(loads, default=0.0)
    if worst < BACKGROUND_WARN_CORES:
        return ""
    return (
        f"other processes used up to {worst:.2f} cores of this machine during the run (column *other load*); "
        "latency tails are then inflated. Rerun on a quiet machine for reference figures."
    )


def profile_phases(ext: bench_extender.ExtenderBenchResult | None, quick: bool) -> list[tuple[str, float]] | None:
    """In-process breakdown of one 5,000-name filter call (only when that scenario ran)."""
    if ext is None or not any(sc.name == TARGET_SCENARIO for sc in ext.scenarios):
        return None
    logging.getLogger().setLevel(logging.WARNING)
    api = profile_extender.build_api(5000)
    names = [n.name for n in bench_extender.make_fleet(5000)]
    body = bench_extender.encode(bench_extender.filter_body(bench_extender.load_pod(), "names", names))
    return profile_extender.phases(api, body, "filter", repeat=5 if quick else 30)


def render_markdown(
    *,
    when: dt.datetime,
    command: str,
    quick: bool,
    total_s: float,
    ext: bench_extender.ExtenderBenchResult | None,
    agent: bench_agent.AgentBenchResult | None,
    phases: list[tuple[str, float]] | None,
    classes: list[dict] | None = None,
    reconnect: list[bench_reconnect.OutageResult] | None = None,
    hostile_ingest: tuple[list[bench_hostile_ingest.Row], bench_hostile_ingest.FloodResult] | None = None,
    hostile_http: list[str] | None = None,
    scheduler: bench_scheduler.SchedulerBenchResult | None = None,
    placement: tuple[bench_placement.SimConfig, list[bench_placement.VariantResult]] | None = None,
    pod_resources: list[str] | None = None,
    baseline: bench_baseline.BaselineResult | None = None,
    floor: bench_floor.FloorResult | None = None,
    placement_kube: tuple[bench_placement.SimConfig, list[bench_placement_kube.KubeVariantResult]] | None = None,
    ingest: tuple[list[str], dict[str, float]] | None = None,
    bursts: list[dict[str, Any]] | None = None,
    ledger: dict[str, Any] | None = None,
    dra: dict[str, Any] | None = None,
) -> str:
    m = machine_facts()
    out = [
        "# kube-gpu-extender benchmark results",
        "",
        "Generated by `bench/run_all.py`; do not edit by hand (rerun it instead).",
        "",
        f"- **Date (UTC):** {when:%Y-%m-%d %H:%M:%S}",
        f"- **Machine:** {m['cpu']}, {m['cores']} cores, {m['memory']} memory; {m['os']}",
        f"- **Python:** {m['python']}",
        f"- **Code:** git {_git_revision()}",
        f"- **Command:** `{command}`" + (" (quick smoke run: too few iterations for stable tails)" if quick else ""),
        f"- **Total bench time:** {total_s:.0f} s",
        "- **On a real GPU:** [RESULTS-gpu.md](RESULTS-gpu.md), written by `bench/gpu_check.py` on a machine "
        "with a GPU (CI has none): the agent's NVML path against nvidia-smi, sampling cost, RSS, GPM under CUDA loads",
        "",
    ]
    p99, filter_ok = filter_target(ext)
    out += ["## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    out.append(
        f"| filter p99 < {TARGET_FILTER_P99_MS:g} ms at 5,000 names | "
        f"{'n/a' if p99 is None else f'{p99:.2f} ms'} | {_verdict(filter_ok)} |"
    )
    if agent is not None:
        out.append(
            f"| agent CPU <= {agent.target_cpu_percent:g} % of one core | {agent.cpu_percent:.2f} % | "
            f"{_verdict(agent.cpu_ok)} |"
        )
        three = next((v for v in agent.compare if v.name == "node-3x"), None)
        if three is not None:
            out.append(
                f"| agent CPU with 3 extender replicas <= {agent.target_cpu_percent:g} % of one core | "
                f"{three.cpu_percent:.2f} % | {_verdict(three.cpu_percent <= agent.target_cpu_percent)} |"
            )
        out.append(
            f"| agent RSS <= {agent.target_rss_mib:g} MiB | {agent.rss_end_mib:.1f} MiB | {_verdict(agent.rss_ok)} |"
        )
    else:
        out += [
            f"| agent CPU <= {bench_agent.TARGET_CPU_PERCENT:g} % of one core | n/a | n/a |",
            f"| agent RSS <= {bench_agent.TARGET_RSS_MIB:g} MiB | n/a | n/a |",
        ]
    if ingest is not None:
        out += ingest_targets(ingest[1])
    if bursts:
        shipped = bench_burst.medians(bursts).get("watch-wait")
        if shipped is not None:
            worst = shipped["misplaced_max"]
            out.append(
                f"| burst of 300 one-GPU pods, real kube-scheduler, shipped config: misplaced pods = "
                f"{bench_burst.TARGET_MISPLACED} (worst round) | {worst:.0f} | "
                f"{_verdict(worst <= bench_burst.TARGET_MISPLACED)} |"
            )
    if ledger:
        r = ledger["ratios_p99"]["ledger, attributed"]
        out.append(
            f"| filter / prioritize p99 at 5,000 names with 40,000 bound pods <= "
            f"{bench_ledger.TARGET_RATIO:g}x without | {r['filter']:.2f}x / {r['prioritize']:.2f}x | "
            f"{_verdict(bench_ledger.attributed_ratio_ok(ledger))} |"
        )
    if dra:
        r = dra["ratios"]["(b) claim pod"]
        out.append(
            f"| filter / prioritize p99 at 5,000 names, claim pod on DRA nodes <= {bench_dra.TARGET_RATIO:g}x "
            f"the device-plugin pod | {r['filter']['p99']:.2f}x / {r['prioritize']['p99']:.2f}x | "
            f"{_verdict(bench_dra.ratio_ok(dra))} |"
        )
    for r in reconnect or []:
        if r.variant == "fixed":
            out.append(
                f"| {r.agents} agents back <= {bench_reconnect.TARGET_S:g} s after a {r.outage_s:.0f} s "
                f"extender outage | {r.last_s:.2f} s | {_verdict(r.ok)} |"
            )
    out.append("")
    busy = background_warning(ext, agent)
    if busy:
        out += [f"> **Warning:** {busy}", ""]

    if ext is not None:
        out += [
            "## gpu-extender: filter and prioritize",
            "",
            f"{ext.nodes_loaded:,} nodes loaded over gRPC (one short stream per node, 64 at a time) in "
            f"{ext.load_s:.2f} s. Extender RSS {ext.extender_rss_after_load_kib / 1024:.0f} MiB after loading, "
            f"{ext.extender_rss_end_kib / 1024:.0f} MiB at the end (peak {ext.extender_hwm_end_kib / 1024:.0f} MiB). "
            f"Prioritize is sent {ext.prioritize_nodes} (column *sent*).",
            "",
            "| scenario | nodes | verb | sent | n | p50 ms | p99 ms | max ms | req/s | request KB | response KB "
            "| server mean ms | other load (cores) |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for sc in ext.scenarios:
            for v in sc.verbs:
                out.append(
                    f"| {sc.name} | {sc.nodes:,} | {v.verb} | {v.nodes_sent:,} | {v.iterations} | {v.p50_ms:.2f} | "
                    f"{v.p99_ms:.2f} | {v.max_ms:.2f} | {v.req_per_s:,.0f} | {v.request_bytes / 1024:,.1f} | "
                    f"{v.response_bytes / 1024:,.1f} | {v.server_mean_ms:.2f} | {sc.background_cores:.2f} |"
                )
        out += [
            "",
            "Filter verdicts per scenario (checked against the loaded state on every answer): "
            + "; ".join(
                f"{sc.name}: {sc.passed} pass, {sc.failed_soft} FailedNodes, "
                f"{sc.failed_unresolvable} FailedAndUnresolvableNodes"
                for sc in ext.scenarios
            )
            + ".",
            "",
        ]
    if phases is not None:
        out += [
            "### Inside one 5,000-name filter call (in-process, no HTTP, best of several)",
            "",
            "| phase | what | ms |",
            "|---|---|---:|",
        ]
        what = {
            "parse": "`wire.parse_extender_args` (json.loads + checks)",
            "question": "`DecisionInputs.decide`: the pod read once (`pod_request.read_pod`), candidates, snapshot, "
            "class plan",
            "decide": "`Decision.filtered` (`class_plan` + `whole_gpus.filter_nodes`)",
            "shortlist": "`decide/shortlist.best`: the passing nodes cut to the `--shortlist` best (after decide)",
            "record": "`verb_log.record_filter` (metrics per failed node + decision log text)",
            "answer": "`wire.filter_result`",
            "encode": "`wire.encode` (json.dumps)",
            "TOTAL (whole call)": (
                "`SchedulerApi.filter` from bytes to bytes, as the server makes it "
                "(a new body each call, collector paused in parse and decide)"
            ),
        }
        for name, ms in phases:
            out.append(f"| {name} | {what.get(name, '')} | {ms:.2f} |")
        out += ["", "Reproduce with `.venv/bin/python bench/profile_extender.py` (adds a cProfile listing).", ""]

    if agent is not None:
        a = agent
        out += [
            "## gpu-agent",
            "",
            f"One node-like agent, `--fake bench/scenarios/bench-8gpu-node.yaml` ({a.gpus} GPUs with the 0.2 "
            "readings), `--interval 1`, the NVML event thread, the kubelet's List (a fake kubelet, "
            "bench/scenarios/bench-kubelet.yaml) and GFD's labels every sample, /metrics scraped every 15 s, "
            f"streaming to one extender; {a.window_s:.1f} s window after a {a.warmup_s:g} s warm-up "
            "(bench/bench_agent.py says how the agent is made to see a GPU node's CPU count).",
            "",
            "| figure | value | target |",
            "|---|---:|---|",
            f"| CPU, % of one core (utime+stime, {a.cpu_ticks} ticks) | {a.cpu_percent:.2f} | "
            f"<= {a.target_cpu_percent:g} % {_verdict(a.cpu_ok)} |",
            f"| VmRSS at the end, MiB | {a.rss_end_mib:.1f} | <= {a.target_rss_mib:g} MiB {_verdict(a.rss_ok)} |",
            f"| VmHWM (peak RSS), MiB | {a.hwm_end_mib:.1f} | |",
            f"| VmRSS at window start, MiB | {a.rss_start_mib:.1f} | |",
            f"| mean NVML pass (`gpu_agent_sample_duration_seconds` sum/count), ms | {a.sample_mean_window_ms:.3f} | |",
            f"| samples in the window / reports sent in total | {a.samples_window} / {a.reports_sent} | |",
            f"| first report stored by the extender, s after agent start | {a.time_to_first_report_s:.2f} | |",
            f"| extender `gpu_extender_nodes_with_data` | {a.extender_nodes_with_data:g} | 1 |",
            f"| extender CPU for this one agent, % of one core | {a.extender_cpu_percent:.2f} | |",
            f"| other processes on the machine during the window, cores | {a.background_cores:.2f} | |",
            "",
        ]

    out += [
        "## How it was measured",
        "",
        "- Real processes: `gpu-extender` (and `gpu-agent`) are started as subprocesses from the project's "
        "`.venv`, on 127.0.0.1 only, with `--stale-after 100000 --forget-after 200000 --log-level warning` for "
        "the extender so no data goes stale and no request is logged. Client, extender and agent share the same "
        "machine's cores.",
        "- GPU state reaches the extender through the real gRPC contract (`StreamNodeReports`): one NodeReport "
        "with 8 GPUs per node, with the 0.2 facts (the kubelet's allocation: a GPU at 40 % utilization or more "
        "is held by a pod; health states; two NVLink islands of 4 GPUs). Fleet: a third busy (7 of 8 GPUs at "
        "90 % utilization, 85 % memory: fails a 2-GPU pod), a third idle, a third partly busy (2-6 busy GPUs); "
        "every 97th node has a lost GPU and every 499th an NVML node error (unresolvable).",
        "- Calls are made like kube-scheduler makes them: strictly sequential (one request in flight), over one "
        "keep-alive HTTP/1.1 connection, filter then prioritize for the same pod (the fixture's 2-GPU Pod from "
        "`tests/fixtures/extender-requests/`), candidates in a shuffled order that changes per call. In "
        'NodeNames mode the body carries `"Nodes": null`; in Nodes mode (`nodeCacheCapable: false`) each '
        'Node is a clone of the fixture\'s Node with its name and hostname changed, and `"NodeNames": null`.',
        "- Prioritize receives the nodes filter passed, as kube-scheduler sends its feasible list "
        "(`bench_extender.py --prioritize-nodes all` sends all N).",
        "- Latency is client-side wall time per request, including JSON encoding of the request and decoding "
        "of the answer on the client (the scheduler pays both). Warm-up requests are excluded; req/s is "
        "1 / mean latency with one request in flight. *server mean ms* is the extender's own "
        "`gpu_extender_request_duration_seconds` histogram over the same requests (handler only: parse, "
        "decide, encode). The client moves its own set-up objects out of its garbage collector's reach "
        "(`gc.freeze()`) before timing, so client GC pauses do not pollute the tails; the extender runs "
        "unmodified, with its own GC pauses included.",
        "- Every answer is checked: HTTP 200; filter has NodeNames (or Nodes) plus FailedNodes, accounts for "
        "every node and gives each node the verdict its loaded state implies; prioritize is a list of "
        "{Host, Score} with integer scores 0-10 for nodes that were sent. Any deviation aborts the run.",
        "- 5,000 candidates is the worst case: it is what the extender receives when every node passes "
        "kube-scheduler's own filters and `percentageOfNodesToScore` is 100. With the default adaptive "
        "setting the scheduler stops looking after about 10 % of a 5,000-node cluster (500 feasible nodes) "
        "before it calls extenders.",
        "- *other load* is machine-wide busy CPU (/proc/stat) minus the benchmark's own processes: work "
        "by anything else on the machine while a scenario ran. On a small VM, repeated runs still differ by "
        "10-20 % in p50 and more in p99 even when it is 0 (host-level noise).",
        "- Agent CPU: utime+stime of the whole process (all threads) from /proc/PID/stat, divided by "
        "SC_CLK_TCK and the window's wall time; RSS from VmRSS/VmHWM in /proc/PID/status. The agent's "
        "/metrics is scraped only outside the window. The fake NVML backend runs pynvml's real ctypes layer; "
        "real NVML calls reach the kernel driver and cost more per sample.",
        "",
    ]
    if classes:
        out += ["", *classes_markdown(classes)]
    if baseline is not None:
        out += [
            "",
            f"## gpu-extender against {baseline.revision}, same run",
            "",
            f"`bench/bench_baseline.py {baseline.revision}`: the names-5000 scenario above, {baseline.rounds} "
            f"round(s) against the extender of `{baseline.revision}` and {baseline.rounds} against this "
            "tree, alternating (same client, fleet and requests); one figure per round, ratios of the medians.",
            "",
            "```",
            *bench_baseline.format_result(baseline),
            "```",
        ]
    if floor is not None:
        out += [
            "",
            "## gpu-extender against a do-nothing extender (the floor), same run",
            "",
            "`bench/bench_floor.py` (module docstring: how). Goal (issue 23): filter+prioritize at 5,000 names "
            "<= 2x the do-nothing floor.",
            "",
            *bench_floor.format_markdown(floor),
        ]
    if ingest is not None:
        out += [
            "",
            "## gpu-extender: ingest at fleet scale",
            "",
            "`bench/bench_ingest.py`: the real extender (both its processes: the one answering kube-scheduler "
            "and its ingest process) and 5,000 simulated agents in one load process (niced: it stands for "
            "remote agents), one long-lived StreamNodeReports stream each over 8 channels; 8-GPU 0.2 reports "
            "from bench_extender's fleet. Flat out: every stream sends as soon as its ack is back (reports/s "
            "per core of extender CPU); paced: every node every second (agents before the report gate); gated: "
            "agents with the gate (1 s samples, a report when something decision-relevant changed, with "
            "probability p per sample, else a heartbeat every 3 s). Then filter (5,000 names) + prioritize "
            "(the nodes filter answered: its --shortlist of 100) with the gated load (p = 0.02) running, "
            "without, and (worst case, not a goal) with the paced every-second load, alternating. Client and "
            "extender share this machine's 2 cores. Below it, "
            "`bench/bench_grpc_floor.py`: a bare grpc.aio server that only acks, at the same rate: the "
            "transport's share of the extender's cost, with shared connections (as the load process) and "
            "one per agent (as in a cluster).",
            "",
            "```",
            *ingest[0],
            "```",
        ]
    if pod_resources:
        out += [
            "",
            "## gpu-agent: one PodResources List",
            "",
            "`bench/bench_pod_resources.py`: what the agent pays per sample to ask the kubelet who holds which "
            "GPU (the fake kubelet: a real gRPC server on a unix socket, first in its own process as the kubelet "
            "is, then in the bench's own process). The agent's CPU per sample is the `CPU` column of "
            "PodAttribution.annotate in the first two blocks.",
            "",
            "```",
            *pod_resources,
            "```",
        ]
    if placement is not None:
        out += ["", *placement_markdown(*placement)]
    if placement_kube is not None:
        cfg, rows = placement_kube
        out += [
            "",
            "### The same fleet through a real kube-scheduler",
            "",
            f"`bench/bench_placement_kube.py`: {cfg.nodes} nodes and {cfg.pods} pods of the same trace (seed "
            f"{cfg.seed}), the node chosen by a real kube-scheduler (the shipped configuration, with the real "
            "extender over HTTPS for the extender variants; `none`: stock kube-scheduler, whose LeastAllocated "
            "scores cpu and memory; `none-gpu`: LeastAllocated on nvidia.com/gpu).",
            "",
            "```",
            bench_placement_kube.format_table(rows),
            bench_placement_kube.LEGEND,
            "```",
        ]
    if scheduler is not None:
        out += ["", *bench_scheduler.markdown_section(scheduler)]
    if bursts:
        out += ["", *bench_burst.markdown(bursts)]
    if ledger:
        out += ["", *bench_ledger.markdown(ledger)]
    if dra:
        out += ["", *bench_dra.markdown(dra)]
    if reconnect:
        out += ["", *reconnect_markdown(reconnect)]
    if hostile_http:
        out += [
            "",
            "## gpu-extender under hostile scheduler requests",
            "",
            "`bench/bench_hostile_http.py`: the handler's synchronous step in-process (best of 5), which is how "
            "long one request holds the event loop (the goal: 100 ms at most within the defaults); the fuzz test "
            "(`tests/e2e/test_hostile_http.py`) sends the same bodies to the real server and checks its answers.",
            "",
            "```",
            *hostile_http,
            "```",
        ]
    if hostile_ingest:
        out += ["", *hostile_ingest_markdown(*hostile_ingest)]
    return "\n".join(out)


def ingest_targets(summary: dict[str, float]) -> list[str]:
    """Issue 13's goals as rows of the targets table (bench_ingest's summary). The 1 s freshness
    and p99 goals are read under gated agents (the report gate at the bench's assumed change rate);
    with fewer than 5,000 agents (--quick) the 5,000-node figures are linear estimates."""
    nodes = int(summary.get("nodes", 5_000))
    rate = 100 * summary.get("change_rate", 0.02)
    heartbeat = summary.get("heartbeat_s", 3.0)
    est = "" if nodes == 5_000 else f" (estimate from {nodes:,})"
    at = "" if nodes == 5_000 else f" (measured at {nodes:,})"
    # (summary key, target, how the figure reads, met?)
    goals: list[tuple[str, str, Callable[[float], str], Callable[[float], bool]]] = [
        (
            "flat_varied_reports_per_extender_core",
            "ingest >= 20,000 reports/s per extender core (8-GPU reports, flat out: the extender's cost per report)",
            lambda v: f"{v:,.0f}",
            lambda v: v >= 20_000,
        ),
        (
            "gated_core_percent_at_5000_nodes",
            f"5,000 nodes at 1 s freshness (agents gated: heartbeat {heartbeat:g} s, "
            f"{rate:g} % of nodes change per second) <= 25 % of an extender core",
            lambda v: f"{v:.1f} %{est}",
            lambda v: v <= 25,
        ),
        (
            "paced_varied_core_percent_at_5000_per_s",
            "(worst case, not the goal: every node reports every 1 s, the "
            "agent before the gate) <= 25 % of an extender core",
            lambda v: f"{v:.1f} %{est}",
            lambda v: v <= 25,
        ),
        *(
            (
                f"{verb}_p99_ratio",
                f"{verb} p99 at 5,000 names while 5,000 gated agents stream <= 1.2x without",
                lambda v: f"{v:.2f}x{at}",
                lambda v: v <= 1.2,
            )
            for verb in ("filter", "prioritize")
        ),
        (
            "extender_rss_max_mib",
            "extender RSS with 5,000 nodes streaming <= 150 MiB (both its processes; the larger of streams open / end)",
            lambda v: f"{v:.0f} MiB{at}",
            lambda v: v <= 150,
        ),
    ]
    return [
        f"| {target} | {shown(summary[key])} | {_verdict(met(summary[key]))} |"
        for key, target, shown, met in goals
        if key in summary
    ]


def ingest_report(quick: bool) -> tuple[list[str], dict[str, float]]:
    """bench_ingest.py's report and summary (it starts its own extender and load process)."""
    raw = OUT_DIR / "ingest.json"
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / "bench_ingest.py"), "--json", str(raw), *(["--quick"] if quick else [])],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO_ROOT,
    )
    if done.returncode != 0:
        raise BenchError(f"bench_ingest.py failed: {done.stderr.strip()[-500:]}")
    lines = done.stdout.rstrip().splitlines()
    # The transport's share: a bare grpc.aio server that only acks, at the gated agents' rate.
    floor = subprocess.run(
        [
            sys.executable,
            str(BENCH_DIR / "bench_grpc_floor.py"),
            *(["--agents", "500", "--settle", "3", "--window", "3"] if quick else []),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    if floor.returncode != 0:
        raise BenchError(f"bench_grpc_floor.py failed: {floor.stderr.strip()[-500:]}")
    return [*lines, "", *floor.stdout.rstrip().splitlines()], json.loads(raw.read_text())["summary"]


def pod_resources_report(calls: int) -> list[str]:
    """bench_pod_resources.py's report (it runs the fake kubelet as its own process)."""
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / "bench_pod_resources.py"), "--calls", str(calls)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    if done.returncode != 0:
        raise BenchError(f"bench_pod_resources.py failed: {done.stderr.strip()[-500:]}")
    return done.stdout.rstrip().splitlines()


def placement_markdown(cfg: bench_placement.SimConfig, results: list[bench_placement.VariantResult]) -> list[str]:
    """Placement quality: kube-scheduler alone against the extender's strategies on one simulated fleet."""
    return [
        "## Placement quality (simulated fleet)",
        "",
        f"`bench/bench_placement.py`: {cfg.nodes} nodes (H100 and A100 8-GPU NVLink boxes, L40S 4-GPU PCIe "
        f"boxes, some time-sliced), {cfg.pods} pods from a seeded trace (seed {cfg.seed}: 1-8 GPUs, pods "
        "that go quiet or end, load from outside Kubernetes, failing and degrading GPUs, dying agents), "
        f"scheduled by replaying kube-scheduler's fit check, then filter and prioritize on the real extender "
        f"(`--stale-after {PLACEMENT_STALE_AFTER_S:g}`), the top score bound; `none` is "
        "kube-scheduler's LeastAllocated alone. bench/placement_sim.py defines every column. Targets "
        "(issue 12): 0 % on short, stale and nvlink; no more pending than `none`.",
        "",
        "```",
        bench_placement.format_table(results),
        bench_placement.LEGEND,
        "```",
    ]


def classes_markdown(classes: list[dict]) -> list[str]:
    """The class-aware path next to the skeleton's, interleaved on one extender (target: within 1.5x)."""
    lines = [
        "## gpu-extender with OME classes",
        "",
        "`bench/bench_classes.py`: 8 AcceleratorClasses, 50 ClusterServingRuntimes, the nodes spread over the 8 "
        "GPU products; the pod is the engine of an InferenceService with policy Cheapest (class plan, runtime "
        "check, class filter with NVML capabilities, availability-aware class ranking on every call). Half the "
        "candidates are in classes the runtime does not list, so they fail as AcceleratorClassNotAllowed (with "
        "OME, the pod's nodeSelector usually keeps them away from the extender: this is the expensive case). "
        "The skeleton column is the plain GPU pod on the same extender, its requests interleaved with the OME "
        "pod's (alternating order), so both paths meet the same host noise.",
        "",
        "| nodes | verb | p50 ms | p99 ms | skeleton p50 / p99 ms (interleaved) | p99 ratio | target <= 1.5x |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in classes:
        for verb in ("filter", "prioritize"):
            base = r["skeleton"][verb]
            ratio = r[verb]["p99_ms"] / base["p99_ms"] if base["p99_ms"] else None
            lines.append(
                f"| {r['nodes']:,} | {verb} | {r[verb]['p50_ms']:.2f} | {r[verb]['p99_ms']:.2f} | "
                f"{base['p50_ms']:.2f} / {base['p99_ms']:.2f} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
                f"{_verdict(None if ratio is None else ratio <= bench_classes.TARGET_RATIO)} |"
            )
    return lines


def reconnect_markdown(results: list[bench_reconnect.OutageResult]) -> list[str]:
    return [
        "## gpu-agent reconnect after an extender outage",
        "",
        f"`bench/bench_reconnect.py`: {results[0].agents} agents with the default flags (backoff 0.2 s doubling to "
        f"{bench_reconnect.MAX_BACKOFF_S:g} s); the extender is stopped, kept down, and started again on the same "
        "ports. Seconds from its gRPC port accepting again until the k-th agent's report is accepted by it "
        "(`gpu_extender_nodes_with_data`, polled every 100 ms). *pre-fix* runs the same agents with the channel "
        "options they had before the fix (gRPC's shared subchannel pool and default reconnect backoff).",
        "",
        bench_reconnect.HEADER,
        *(bench_reconnect.format_row(r) for r in results),
        "",
    ]


def hostile_ingest_markdown(rows: list[bench_hostile_ingest.Row], flood: bench_hostile_ingest.FloodResult) -> list[str]:
    return [
        "## gpu-extender under hostile gRPC clients",
        "",
        "`bench/bench_hostile_ingest.py`: the real extender (`--agent-auth none`); 100 made-up nodes (253-character "
        "names) each send 3 maximal reports (256 GPUs, every string and list at the ingest's bounds) on their own "
        "stream; with `--inventory` only `--max-unknown-nodes` (64) of them are kept. VmRSS from /proc/PID/status "
        "1 s after the last ack. Before the bounds, 100 nodes x 3.4 MB reports took it from 91 to 436 MiB.",
        "",
        bench_hostile_ingest.HEADER,
        *(bench_hostile_ingest.format_row(r) for r in rows),
        "",
        bench_hostile_ingest.format_flood(flood) + " (before the pacing: 133,876 reports in 15 s at ~100 % CPU).",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke check: few iterations and a 5 s agent window; RESULTS.md left alone"
    )
    parser.add_argument(
        "--only",
        choices=(
            "extender",
            "agent",
            "reconnect",
            "ingest",
            "http",
            "scheduler",
            "placement",
            "fleet",
            "bursts",
            "ledger",
            "dra",
        ),
        help="run only this benchmark",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also compare filter/prioritize at 5,000 names with this git revision, same run",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[s.name for s in bench_extender.SCENARIOS],
        help="extender scenario to run (repeatable; default: all)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help=f"write the Markdown report here (default: {RESULTS_MD.relative_to(REPO_ROOT)}, "
        "not written by --quick unless given)",
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    started = time.monotonic()
    when = dt.datetime.now(dt.UTC)
    ext: bench_extender.ExtenderBenchResult | None = None
    agent: bench_agent.AgentBenchResult | None = None
    reconnect: list[bench_reconnect.OutageResult] | None = None
    hostile_ingest: tuple[list[bench_hostile_ingest.Row], bench_hostile_ingest.FloodResult] | None = None
    classes: list[dict] | None = None
    hostile_http: list[str] | None = None
    scheduler: bench_scheduler.SchedulerBenchResult | None = None
    placement: tuple[bench_placement.SimConfig, list[bench_placement.VariantResult]] | None = None
    pod_resources: list[str] | None = None
    baseline: bench_baseline.BaselineResult | None = None
    floor: bench_floor.FloorResult | None = None
    placement_kube: tuple[bench_placement.SimConfig, list[bench_placement_kube.KubeVariantResult]] | None = None
    fleet_ingest: tuple[list[str], dict[str, float]] | None = None
    bursts: list[dict[str, Any]] | None = None
    ledger: dict[str, Any] | None = None
    dra: dict[str, Any] | None = None
    try:
        if args.only in (None, "extender"):
            print("== gpu-extender: filter / prioritize", flush=True)
            ext = bench_extender.run(args.scenario, quick=args.quick)
            print(bench_extender.format_table(ext), flush=True)
            print("== gpu-extender with 8 classes and 50 runtimes", flush=True)
            classes = bench_classes.run(quick=args.quick)
            for line in classes_markdown(classes)[-2 * len(classes) :]:
                print(line, flush=True)
        if args.baseline and args.only in (None, "extender"):
            print(f"== gpu-extender against {args.baseline}, same run", flush=True)
            baseline = bench_baseline.run(args.baseline, rounds=1 if args.quick else 2, quick=args.quick)
            print("\n".join(bench_baseline.format_result(baseline)), flush=True)
        if args.only in (None, "extender"):
            print("== gpu-extender against a do-nothing extender (the floor), same run", flush=True)
            floor = bench_floor.run(quick=args.quick)
            print("\n".join(bench_floor.format_markdown(floor)), flush=True)
        if args.only in (None, "agent"):
            print("== gpu-agent: CPU and memory", flush=True)
            agent = bench_agent.run(quick=args.quick)
            print(bench_agent.format_result(agent), flush=True)
            print("== gpu-agent: one PodResources List", flush=True)
            pod_resources = pod_resources_report(calls=100 if args.quick else 1000)
            print("\n".join(pod_resources), flush=True)
        if args.only in (None, "reconnect"):
            print("== gpu-agent: reconnect after an extender outage", flush=True)
            print(bench_reconnect.HEADER, flush=True)  # rows are printed as they are measured
            reconnect = bench_reconnect.run(quick=args.quick)
        if args.only in (None, "ingest"):
            print("== gpu-extender: hostile gRPC clients", flush=True)
            hostile_ingest = bench_hostile_ingest.run(quick=args.quick)
            print(bench_hostile_ingest.format_result(*hostile_ingest), flush=True)
        if args.only in (None, "fleet"):
            print("== gpu-extender: ingest at fleet scale (5,000 agents)", flush=True)
            fleet_ingest = ingest_report(args.quick)
            print("\n".join(fleet_ingest[0]), flush=True)
        if args.only in (None, "http"):
            print("== gpu-extender: hostile scheduler requests (event-loop hold)", flush=True)
            hostile_http = bench_hostile_http.report(repeat=2 if args.quick else 5)
            print("\n".join(hostile_http), flush=True)
        if args.only in (None, "placement"):
            print("== placement quality on a simulated fleet", flush=True)
            cfg = bench_placement.SimConfig(nodes=60, pods=240) if args.quick else bench_placement.SimConfig()
            placement = (cfg, bench_placement.run(cfg, bench_placement.VARIANTS, PLACEMENT_STALE_AFTER_S))
            print(bench_placement.format_table(placement[1]), flush=True)
            skip = bench_scheduler.unavailable()
            if skip is not None:
                print(f"== placement quality through a real kube-scheduler: skipped ({skip})", flush=True)
            else:
                print("== placement quality through a real kube-scheduler", flush=True)
                kube_cfg = bench_placement.SimConfig(
                    nodes=bench_placement_kube.DEFAULT_NODES, pods=bench_placement_kube.DEFAULT_PODS
                )
                placement_kube = (
                    kube_cfg,
                    bench_placement_kube.run(
                        kube_cfg,
                        bench_placement_kube.DEFAULT_VARIANTS,
                        PLACEMENT_STALE_AFTER_S,
                        lambda line: print(f"  {line}", flush=True),
                    ),
                )
                print(bench_placement_kube.format_table(placement_kube[1]), flush=True)
        if args.only in (None, "scheduler"):
            skip = bench_scheduler.unavailable()
            if skip is not None:
                print(f"== real kube-scheduler: binding throughput: skipped ({skip})", flush=True)
            else:
                print("== real kube-scheduler: binding throughput", flush=True)
                scheduler = bench_scheduler.run(quick=args.quick)
                print(bench_scheduler.format_result(scheduler), flush=True)
        if args.only in (None, "bursts"):
            skip = bench_burst.unavailable()
            if skip is not None:
                print(f"== bursts through a real kube-scheduler: skipped ({skip})", flush=True)
            else:
                print("== bursts through a real kube-scheduler (bindings and the next filter)", flush=True)
                bursts = bench_burst.run(
                    rounds=1 if args.quick else 3, progress=lambda line: print(f"  {line}", flush=True)
                )
                print("\n".join(bench_burst.table(bursts)), flush=True)
        if args.only in (None, "ledger"):
            print("== the bound-pod ledger at scale (40,000 pods)", flush=True)
            ledger = bench_ledger.run(quick=args.quick)
            print("\n".join(bench_ledger.report(ledger)), flush=True)
        if args.only in (None, "dra"):
            print("== DRA at fleet scale (40,000 devices, 20,000 claims)", flush=True)
            dra = bench_dra.run(quick=args.quick)
            print("\n".join(bench_dra.report(dra)), flush=True)
        phases = profile_phases(ext, args.quick)
    except BenchError as exc:
        print(f"run_all: FAILED: {exc}", file=sys.stderr)
        return 1
    total_s = time.monotonic() - started

    p99, filter_ok = filter_target(ext)
    print("\n== summary")
    if p99 is not None:
        print(f"  filter p99 at 5,000 names: {p99:.2f} ms (target < {TARGET_FILTER_P99_MS:g} ms) {_verdict(filter_ok)}")
    if phases is not None:
        print("  inside one 5,000-name filter call (ms): " + ", ".join(f"{n} {ms:.2f}" for n, ms in phases))
    if agent is not None:
        print(
            f"  agent CPU {agent.cpu_percent:.2f} % of a core (<= {agent.target_cpu_percent:g} %) "
            f"{_verdict(agent.cpu_ok)}; RSS {agent.rss_end_mib:.1f} MiB (<= {agent.target_rss_mib:g} MiB) "
            f"{_verdict(agent.rss_ok)}"
        )
    for r in reconnect or []:
        print(
            f"  {r.variant}: {r.agents} agents after a {r.outage_s:.0f} s outage all back in "
            f"{r.last_s:.2f} s (<= {bench_reconnect.TARGET_S:g} s) {_verdict(r.ok)}"
        )
    if scheduler is not None:
        print(
            "  real kube-scheduler, median pods/s: "
            + ", ".join(f"{key} {bench_scheduler.fmt_value(scheduler.median(key))}" for key in scheduler.variants)
            + "; "
            + ", ".join(
                f"c/{den} {bench_scheduler.fmt_value(scheduler.ratio('c', den), '.2f', 'x')}"
                for den in ("b1", "b2", "a")
            )
        )
    busy = background_warning(ext, agent)
    if busy:
        print(f"  WARNING: {busy}")
    print(f"  total {total_s:.0f} s")

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    raw = {
        "date_utc": when.isoformat(),
        "machine": machine_facts(),
        "quick": args.quick,
        "extender": asdict(ext) if ext else None,
        "agent": asdict(agent) if agent else None,
        "filter_phases_ms": dict(phases) if phases else None,
        "classes": classes,
        "reconnect": [asdict(r) for r in reconnect] if reconnect else None,
        "hostile_ingest": {"rows": [asdict(r) for r in hostile_ingest[0]], "flood": asdict(hostile_ingest[1])}
        if hostile_ingest
        else None,
        "hostile_http": hostile_http,
        "scheduler": asdict(scheduler) if scheduler else None,
        "placement": [asdict(r) for r in placement[1]] if placement else None,
        "pod_resources": pod_resources,
        "baseline": asdict(baseline) if baseline else None,
        "placement_kube": [asdict(r) for r in placement_kube[1]] if placement_kube else None,
        "fleet_ingest": fleet_ingest[1] if fleet_ingest else None,
        "bursts": bursts,
        "ledger": ledger,
        "dra": dra,
    }
    (OUT_DIR / "results.json").write_text(json.dumps(raw, indent=2))

    target = args.results or (None if args.quick else RESULTS_MD)
    if target is None:
        print("  --quick: RESULTS.md not rewritten (pass --results PATH to write one)")
        return 0
    extra = " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    command = "./dev.sh bench" + (f" {extra}" if extra else "")
    target.write_text(
        render_markdown(
            when=when,
            command=command,
            quick=args.quick,
            total_s=total_s,
            ext=ext,
            agent=agent,
            phases=phases,
            classes=classes,
            reconnect=reconnect,
            hostile_ingest=hostile_ingest,
            hostile_http=hostile_http,
            scheduler=scheduler,
            placement=placement,
            pod_resources=pod_resources,
            baseline=baseline,
            floor=floor,
            placement_kube=placement_kube,
            ingest=fleet_ingest,
            bursts=bursts,
            ledger=ledger,
            dra=dra,
        )
    )
    print(f"  wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
