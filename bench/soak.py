"""Soak: a busy fleet under faults, with invariants checked throughout (issue 54).

What runs, all on loopback: the real control plane (etcd, kube-apiserver, kube-scheduler from the
shipped gpu-scheduler configuration), two gpu-extender replicas (`--peers` each other, as deploy/
runs them) behind one address that moves as a Service's endpoints do, two relays between the
agents and the replicas, and simulated agents for a fleet of device-plugin nodes in cliques and a
clique of DRA nodes (bench/soak_fleet.py: GPUs idle, busy outside Kubernetes, unhealthy or
flapping; the DRA nodes' GPUs published in ResourceSlices as NVIDIA's driver does, claims made from
ResourceClaimTemplates by kube-controller-manager). Each hop the harness can cut goes through a
forwarder of its own (tests/tcp_forward.py): agents to each relay, each relay to each replica,
kube-scheduler to the replicas' address.

A steady mix of work: single pods of 1-8 GPUs (a fifth of them of a high PriorityClass, which may
preempt), LeaderWorkerSet groups of 2 x 4 GPUs with the clique affinity, claim pods of 1, 2 or 4
DRA GPUs, each living 30-120 s once bound, the fleet kept about `--fill` full. Faults at seeded
random times, one at a time: SIGKILL (then a restart on the same ports) and SIGSTOP of each replica
and relay, and of a node's agent (simulated in the harness: its streams closed for 3 s, or held open
and silent for 5-20 s), kube-apiserver and etcd stopped (SIGSTOP) for 5-60 s and 5-20 s, etcd killed and started
again after 2-10 s, connections cut on a hop, an agent's clock stepped 5 minutes, the device-taint
writer's Lease deleted under its leader (between two writes, or while it writes: 1.2 s after a GPU
turned unhealthy). kube-scheduler is restarted if it exits (it does when it cannot renew its Lease:
as the kubelet would restart it).

Invariants, checked every `Settings.check_every_s` (2 s), not only at the end:
- misplaced: a node holding pods of more GPUs than it ever had good (idle, or flapping); a claim
  holding a device whose GPU is busy or unhealthy;
- split: a group's bound members in two cliques;
- stuck: a pod pending for over STUCK_S while no fault is on (nor ended within GRACE_S) and a node
  (a clique, for a group's members) has room for it on GPUs always good;
- replicas disagree: their /explain of one probe pod passes different nodes for over AGREE_S;
- not recovered: after a fault ends, both replicas ready, with every node's data, and agreeing,
  within RECOVER_S (the time it took is the fault's recovery figure);
and at the end, with every pod deleted: no open binding, hold or ledger entry left on either
replica; each node's GPUsUsable condition and our DeviceTaintRules as its agents say; RSS and open
files of every process sampled throughout (slope after warm-up, MiB and files per hour; and over
the run's second half alone, where warm-up's caches have filled: what a leak keeps and warm-up does
not). A process spared from faults (`--spare a`) runs the whole hour as one process: its slope is the
one to read for a leak.

Run: `.venv/bin/python bench/soak.py [--minutes 60] [--seed 1] [--nodes 24] [--json out.json]
[--keep DIR] [--faults replica_kill,...] [--spare a,r1]`
(needs the control plane's binaries: KUBEBUILDER_ASSETS, as the suite's kube tests).
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import soak_fleet as F  # noqa: E402
import trustme  # noqa: E402

from gpuextender.extender.state.device_taints import BUSY_PREFIX, rule_name  # noqa: E402
from tests.control_plane import (  # noqa: E402
    ControlPlane,
    Kube,
    KubeError,
    Process,
    assets,
    skip_reason,
    start_process,
)
from tests.extender.dra_objects import device_class, gpu_slice  # noqa: E402
from tests.harness import Proc, free_port, http, metric, parse_metrics  # noqa: E402
from tests.kube import groups as G  # noqa: E402
from tests.kube.conftest import install_crds  # noqa: E402
from tests.kube.scene import EXTENDER_NAME, Scene, scene  # noqa: E402
from tests.tcp_forward import Forwarder  # noqa: E402

STUCK_S = 60.0  # a pod pending this long while room exists and no fault is on: stuck
GRACE_S = 30.0  # after a fault ends, the system may settle this long before "stuck" counts
AGREE_S = 10.0  # replicas' answers may differ this long (bindings reach each one's watch apart)
RECOVER_S = 120.0
TICK_S = 0.5
DRA = "/apis/resource.k8s.io/v1"
CLAIM_SIZES = (1, 2, 4)
RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
TAINT_GATES = ("--feature-gates=DRADeviceTaints=true,DRADeviceTaintRules=true",)
PRIORITIES = {"low": 10, "high": 1000}
# As deploy/ runs them, but quicker holds (a soak of minutes must see them end) and
# --no-fit-policy reject: the shipped pass-all lets kube-scheduler place a pod no node fits, on busy
# GPUs by design (counted in gpu_extender_filter_fallbacks_total), which "misplaced" would count.
REPLICA_FLAGS = (
    "--stale-after", "30", "--forget-after", "600", "--readiness-grace", "30", "--binding-wait", "0.5",
    "--busy-hold", "5", "--device-taint-after", "1", "--device-taint-clear-after", "5",
    "--group-members-grace", "5", "--group-hold", "30", "--no-fit-policy", "reject",
)  # fmt: skip
FAULTS = (
    "replica_kill",
    "replica_stop",
    "relay_kill",
    "relay_stop",
    "cut",
    "apiserver_stop",
    "etcd_stop",
    "clock_step",
    "lease_lost",
    "etcd_restart",
    "lease_lost_writing",
    "agent_kill",
    "agent_stop",
)
REPLICAS, RELAYS = ("a", "b"), ("r1", "r2")
ON_REPLICA, ON_RELAY = ("replica_kill", "replica_stop"), ("relay_kill", "relay_stop")
LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpu-extender/leases/gpu-extender-device-taints"
WRITING_AFTER_S = 1.2  # lease_lost_writing: the Lease goes this long after a GPU turned unhealthy
# (--device-taint-after 1: the leader is writing the node's condition then)


@dataclass
class Settings:
    minutes: float = 60.0
    seed: int = 1
    nodes: int = 24
    fill: float = 0.7
    check_every_s: float = 2.0
    fault_gap_s: tuple[float, float] = (10.0, 40.0)
    fault_max_s: float = 60.0  # no fault lasts longer (the suite's five minutes hold many)
    faults: tuple[str, ...] = FAULTS  # the kinds drawn from
    spare: tuple[str, ...] = ()  # replicas (a, b) and relays (r1, r2) never killed or stopped
    dra_nodes: int = 4  # nodes whose GPUs come through DRA (a clique of their own; claim pods)
    flap_s: float = 15.0
    warmup_s: float = 30.0  # before the first fault (and the RSS slope's start)


@dataclass
class Fault:
    kind: str
    target: str
    started: float
    ends: float  # when the fault is lifted (monotonic)
    ended: float | None = None
    index: int = -1  # its row in Report.faults
    lease_gone: bool = False  # lease_lost_writing: the Lease deleted


@dataclass
class Report:
    settings: dict[str, Any]
    seconds: float = 0.0
    pods_created: int = 0
    groups_created: int = 0
    pods_bound: int = 0
    pods_deleted: int = 0
    preempted: int = 0
    checks: int = 0
    violations: dict[str, list[str]] = field(
        default_factory=lambda: {k: [] for k in ("misplaced", "split", "stuck", "disagree", "not_recovered", "end")}
    )
    faults: list[dict[str, Any]] = field(default_factory=list)
    recovery: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> p50, p99, max, n
    memory: dict[str, dict[str, float]] = field(default_factory=dict)  # process -> rss MiB, MiB/h, fds, fds/h
    scheduler_restarts: int = 0
    loop_lag_max_s: dict[str, float] = field(default_factory=dict)  # per replica (its last start on)
    agents: dict[str, int] = field(default_factory=dict)

    def ok(self) -> bool:
        return not any(self.violations.values())


# -- processes ------------------------------------------------------------------------------------


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (the extender's ingest workers)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children") if Path(f"/proc/{p}/task").exists() else ():
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return found


def rss_and_fds(pid: int, children: bool = True) -> tuple[float, int] | None:
    """The tree's resident MiB and open files (or the process's alone); None once it is gone."""
    rss, fds = 0.0, 0
    for p in tree(pid) if children else [pid]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) / 1024
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            if p == pid:
                return None
    return rss, fds


def drawable(s: Settings) -> tuple[str, ...]:
    """The fault kinds drawn from: a kind whose every target is spared is not."""
    gone = (ON_REPLICA if set(REPLICAS) <= set(s.spare) else ()) + (ON_RELAY if set(RELAYS) <= set(s.spare) else ())
    return tuple(k for k in s.faults if k not in gone)


def signal_tree(pid: int, sig: int) -> None:
    for p in tree(pid):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per hour; 0 with fewer than 3 points."""
    if len(points) < 3:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 3600


# -- the harness ----------------------------------------------------------------------------------


class Soak:
    def __init__(self, plane: ControlPlane, kube: Kube, world: Scene, settings: Settings) -> None:
        self.plane, self.kube, self.world, self.s = plane, kube, world, settings
        self.rng = random.Random(settings.seed)
        self.ns = world.ns
        self.plugin = F.make_fleet(self.ns, settings.nodes, self.rng)
        # (their own generator: the device-plugin fleet and its faults stay what the seed made them)
        self.dra = F.make_fleet(f"{self.ns}-dra", settings.dra_nodes, random.Random(settings.seed + 1))
        self.fleet = self.plugin + self.dra
        self.nodes = F.by_name(self.fleet)
        self.report = Report(asdict(settings))
        self.started = time.monotonic()
        self.fault: Fault | None = None
        self.next_fault_at = self.started + settings.warmup_s
        self.recovering: list[Fault] = []
        self.last_fault_end = 0.0
        self.samples: dict[str, list[tuple[float, float, int]]] = {}
        self.lifetimes: dict[str, float] = {}  # pod -> when it is deleted (monotonic), once bound
        self.group_of: dict[str, str] = {}
        self.seq = 0
        self.dra_rng = random.Random(settings.seed + 2)  # the claim pods' draws, apart from the rest
        self.disagree_since: float | None = None
        self.stopped: set[str] = set()  # processes SIGSTOPped now

    # -- setup --

    def setup(self) -> None:
        kube, ns = self.kube, self.ns
        dra = {n.name for n in self.dra}
        for n in self.fleet:
            kube.create_node(
                n.name,
                None if n.name in dra else F.GPUS,  # DRA: no nvidia.com/gpu, the GPUs are in a ResourceSlice
                {
                    G.FLEET_LABEL: ns,
                    F.CLIQUE: n.clique,
                    "nvidia.com/gpu.product": F.PRODUCT_LABEL,
                    "nvidia.com/gpu.count": str(F.GPUS),
                },
            )
            self.world.nodes.append(n.name)
        if self.dra:
            self._dra_setup()
        for name, value in PRIORITIES.items():
            kube.create(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {"metadata": {"name": f"{ns}-{name}"}, "value": value, "preemptionPolicy": "PreemptLowerPriority"},
            )
        self.ports = {x: {"http": free_port(), "grpc": free_port()} for x in ("a", "b")}
        # Relays reach each replica through a forwarder of their own (cut by the harness).
        self.to_replica = {
            (r, x): Forwarder(free_port(), self.ports[x]["grpc"]) for r in ("r1", "r2") for x in ("a", "b")
        }
        self.replicas: dict[str, Proc] = {}
        for x in ("a", "b"):
            self.replicas[x] = self._replica(x, wait=True)
        self.relay_ports = {r: {"grpc": free_port(), "metrics": free_port()} for r in ("r1", "r2")}
        self.relays: dict[str, Proc] = {r: self._relay(r) for r in ("r1", "r2")}
        self.to_relay = {r: Forwarder(free_port(), self.relay_ports[r]["grpc"]) for r in ("r1", "r2")}
        self.agents = F.Agents(self.fleet, [f.listen_port for f in self.to_relay.values()], self.s.flap_s)
        self.agents.start()
        for x in ("a", "b"):
            self._wait(f"replica {x} ready with every node's data", partial(self._whole, x), 90)
        self.service = Forwarder(free_port(), self.ports["a"]["http"])
        self.serving = "a"
        self.scheduler = self._scheduler()

    def _dra_setup(self) -> None:
        """NVIDIA's DRA driver's objects for the DRA nodes (their devices' uuid the agents' GPUs'), a
        ResourceClaimTemplate per claim size, and kube-controller-manager (its resourceclaim
        controller makes a pod's claim from its template; the garbage collector deletes it)."""
        kube, ns = self.kube, self.ns
        self.device_class = f"{ns}-gpu"
        kube.create(f"{DRA}/deviceclasses", device_class(self.device_class, None))
        self.world.dra_objects.append(f"{DRA}/deviceclasses/{self.device_class}")
        for n in self.dra:
            published = gpu_slice(n.name, F.GPUS, uuid_of=partial(_agent_uuid, n.name))
            kube.create(f"{DRA}/resourceslices", published)
            self.world.dra_objects.append(f"{DRA}/resourceslices/{published['metadata']['name']}")
        for k in CLAIM_SIZES:
            request = {"name": "gpus", "exactly": {"deviceClassName": self.device_class, "count": k}}
            template = {"metadata": {"name": f"gpus-{k}"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
            kube.create(f"{DRA}/namespaces/{ns}/resourceclaimtemplates", template)
        self.controllers = self.plane.controller_manager()

    def _replica(self, x: str, wait: bool = False) -> Proc:
        other = "b" if x == "a" else "a"
        peers = ("--peers", f"127.0.0.1:{self.ports[other]['http']}", "--peers-ca", str(self.world.ca_file))
        return self.world.extender(
            *REPLICA_FLAGS,
            *peers,
            http_port=self.ports[x]["http"],
            grpc_port=self.ports[x]["grpc"],
            wait_ready=wait,
        )

    def _relay(self, r: str) -> Proc:
        ports = self.relay_ports[r]
        args = ["relay", "--grpc-addr", f"127.0.0.1:{ports['grpc']}", "--metrics-addr", f"127.0.0.1:{ports['metrics']}"]
        for x in ("a", "b"):
            args += ["--extender", f"127.0.0.1:{self.to_replica[(r, x)].listen_port}"]
        args += ["--extender-tls-ca", str(self.world.ca_file), "--extender-tls-server-name", EXTENDER_NAME]
        return self.world.procs.spawn(f"relay-{r}", "gpuextender.extender", args, dict(ports))

    def _scheduler(self) -> Process:
        # (the gates that make kube-scheduler v1.35.4's DRA allocator honour DeviceTaintRules)
        return self.world.scheduler(None, port=self.service.listen_port, extra_args=TAINT_GATES)

    # -- reading the replicas --

    def _scrape(self, x: str) -> Any:
        status, raw = http("GET", self.world.url(self.replicas[x]) + "/metrics", None, 5, self.world.client_tls)
        if status != 200:
            raise OSError(f"/metrics {status}")
        return parse_metrics(raw.decode())

    def _ready(self, x: str) -> bool:
        try:
            status, _ = http("GET", self.world.url(self.replicas[x]) + "/readyz", None, 3, self.world.client_tls)
        except OSError:
            return False
        return status == 200

    def _whole(self, x: str) -> bool:
        """Ready, with data for every node."""
        if x in self.stopped or not self.replicas[x].alive() or not self._ready(x):
            return False
        try:
            return metric(self._scrape(x), "gpu_extender_nodes_with_data") == len(self.fleet)
        except OSError:
            return False

    def _passes(self, x: str) -> frozenset[str] | None:
        """The nodes a 1-GPU probe pod passes on replica `x` (/explain holds nothing)."""
        pod = {
            "metadata": {"name": "probe", "namespace": self.ns, "uid": "soak-probe"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        }
        body = json.dumps({"Pod": pod, "NodeNames": sorted(self.nodes)}).encode()
        try:
            status, raw = http("POST", self.world.url(self.replicas[x]) + "/explain", body, 5, self.world.client_tls)
        except OSError:
            return None
        if status != 200:
            return None
        return frozenset(r["node"] for r in json.loads(raw)["nodes"] if r["result"] == "pass")

    def _agree(self) -> bool:
        a, b = self._passes("a"), self._passes("b")
        return a is not None and a == b

    @staticmethod
    def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.25)

    # -- the run --

    def run(self) -> Report:
        self.started = time.monotonic()  # (after the set-up: the minutes are the workload's)
        self.next_fault_at = self.started + self.s.warmup_s
        end = self.started + self.s.minutes * 60
        next_check = self.started
        while (now := time.monotonic()) < end:
            try:
                pods = self._pods()
            except (OSError, KubeError):
                pods = None  # the API server stopped: nothing to read or create this tick
            if pods is not None:
                self._workload(pods, now)
            self._faults(now)
            self._supervise()
            self._recoveries(now)
            if pods is not None and now >= next_check:
                self._check(pods, now)
                next_check = now + self.s.check_every_s
            self._sample(now)
            time.sleep(TICK_S)
        self._end_fault(time.monotonic())
        while self.recovering:  # the last fault's recovery is measured too
            self._recoveries(time.monotonic())
            time.sleep(TICK_S / 2)
        self._finish()
        self.report.seconds = round(time.monotonic() - self.started, 1)
        return self.report

    def _pods(self) -> list[dict[str, Any]]:
        return list(self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/pods", timeout=3)["items"])

    # -- work --

    def _workload(self, pods: list[dict[str, Any]], now: float) -> None:
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        present = {p["metadata"]["name"] for p in live}
        for name in [n for n in self.lifetimes if n not in present]:  # not deleted by us: preempted
            self.report.preempted += 1
            self.lifetimes.pop(name, None)
            self.group_of.pop(name, None)
        for p in live:
            name = p["metadata"]["name"]
            if p["spec"].get("nodeName") and name not in self.lifetimes:
                self.report.pods_bound += 1
                self.lifetimes[name] = now + self.rng.uniform(30, 120)
        gone = {name for name, at in self.lifetimes.items() if at <= now}
        for group in {self.group_of[n] for n in gone if n in self.group_of}:  # a group ends whole
            gone |= {n for n, g in self.group_of.items() if g == group}
        for name in gone:
            self._delete(name)
        staying = [p for p in live if p["metadata"]["name"] not in gone]
        capacity = sum(n.sure() for n in self.plugin)
        asked = sum(_gpus(p) for p in staying)
        if asked < self.s.fill * capacity and self.rng.random() < 0.8:
            if self.rng.random() < 0.2:
                self._create_group()
            else:
                self._create_single()
        if self.dra and self.dra_rng.random() < 0.3:
            claimed = sum(_claim_gpus(p) for p in staying)
            if claimed < self.s.fill * sum(n.sure() for n in self.dra):
                self._create_claim_pod()

    def _create_single(self) -> None:
        self.seq += 1
        gpus = self.rng.choice((1, 1, 2, 2, 4, 8))
        priority = "high" if self.rng.random() < 0.2 else "low"
        pod = G.member_pod(G.Group(f"p{self.seq:05d}", G.LWS, 1, gpus), 0, self.ns, affinity=False)
        pod["metadata"] = {"name": f"p{self.seq:05d}", "labels": {"app": "single"}}
        self._post(pod, priority)
        self.report.pods_created += 1

    def _create_claim_pod(self) -> None:
        self.seq += 1
        k = self.dra_rng.choice(CLAIM_SIZES)
        name = f"c{self.seq:05d}"
        container = {"name": "main", "image": "registry.example/llm:1", "resources": {"claims": [{"name": "gpus"}]}}
        spec = {
            "schedulerName": "gpu-scheduler",
            "nodeSelector": {G.FLEET_LABEL: self.ns},
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{k}"}],
            "containers": [container],
        }
        self._post({"metadata": {"name": name, "labels": {"app": "claim"}}, "spec": spec}, "low")
        self.report.pods_created += 1

    def _create_group(self) -> None:
        self.seq += 1
        group = G.Group(f"g{self.seq:05d}", G.LWS, 2, 4)
        for i in range(group.members):
            pod = G.member_pod(group, i, self.ns)
            self.group_of[pod["metadata"]["name"]] = group.name
            self._post(pod, "low")
        self.report.groups_created += 1

    def _post(self, pod: dict[str, Any], priority: str) -> None:
        pod["spec"] |= {"priorityClassName": f"{self.ns}-{priority}", "terminationGracePeriodSeconds": 0}
        try:
            self.kube.create(f"/api/v1/namespaces/{self.ns}/pods", pod)
        except (OSError, KubeError):
            pass  # the API server stopped meanwhile: this one is not made

    def _delete(self, name: str) -> None:
        try:
            self.kube.delete(f"/api/v1/namespaces/{self.ns}/pods/{name}")
        except (OSError, KubeError):
            return
        self.lifetimes.pop(name, None)
        self.group_of.pop(name, None)
        self.report.pods_deleted += 1

    # -- faults --

    def _faults(self, now: float) -> None:
        fault = self.fault
        if fault is not None and fault.kind == "lease_lost_writing" and not fault.lease_gone:
            if now >= fault.started + WRITING_AFTER_S:
                self._lose_lease()
                fault.lease_gone = True
        if self.fault is not None and now >= self.fault.ends:
            self._end_fault(now)
        if self.fault is None and now >= self.next_fault_at:
            self._start_fault(now, self.rng.choice(drawable(self.s)))

    def _start_fault(self, now: float, kind: str) -> None:
        rng = self.rng
        x = rng.choice([k for k in REPLICAS if k not in self.s.spare] or REPLICAS)
        r = rng.choice([k for k in RELAYS if k not in self.s.spare] or RELAYS)
        fault = Fault(kind, "", now, now)
        if kind == "replica_kill":
            fault.target, fault.ends = x, now + 3.0
            self._kill(self.replicas[x])
            self._serve_elsewhere(x)
        elif kind == "replica_stop":
            fault.target, fault.ends = x, now + self._lasting(5, 20)
            signal_tree(self.replicas[x].popen.pid, signal.SIGSTOP)
            self.stopped.add(x)
            self._serve_elsewhere(x)
        elif kind == "relay_kill":
            fault.target, fault.ends = r, now + 3.0
            self._kill(self.relays[r])
        elif kind == "relay_stop":
            fault.target, fault.ends = r, now + self._lasting(5, 20)
            signal_tree(self.relays[r].popen.pid, signal.SIGSTOP)
            self.stopped.add(r)
        elif kind == "cut":
            hops = {f"agents->{k}": f for k, f in self.to_relay.items()}
            hops |= {f"{k[0]}->{k[1]}": f for k, f in self.to_replica.items()}
            hops["scheduler->replicas"] = self.service
            name = rng.choice(sorted(hops))
            hops[name].move_to(hops[name].target_port)
            fault.target, fault.ends = name, now
        elif kind == "apiserver_stop":
            fault.target, fault.ends = "kube-apiserver", now + self._lasting(5, 60)
            signal_tree(self._plane_pid("kube-apiserver"), signal.SIGSTOP)
        elif kind == "etcd_stop":
            fault.target, fault.ends = "etcd", now + self._lasting(5, 20)
            signal_tree(self._plane_pid("etcd"), signal.SIGSTOP)
        elif kind == "clock_step":
            node = rng.choice(self.fleet).name
            fault.target, fault.ends = node, now + self._lasting(10, 25)
            self.agents.step(node, 300.0)
        elif kind == "lease_lost":
            fault.target = "gpu-extender-device-taints"
            self._lose_lease()
        elif kind == "etcd_restart":
            fault.target, fault.ends = "etcd", now + self._lasting(2, 10)
            self._plane_process("etcd").stop(signal.SIGKILL)
        elif kind == "agent_kill":  # its streams end at once; a restart after 3 s, as a DaemonSet's
            fault.target, fault.ends = rng.choice(self.fleet).name, now + 3.0
            self.agents.kill(fault.target, True)
        elif kind == "agent_stop":  # its streams stay open and silent: the node's data goes stale
            fault.target, fault.ends = rng.choice(self.fleet).name, now + self._lasting(5, 20)
            self.agents.pause(fault.target, True)
        elif kind == "lease_lost_writing":
            healthy = rng.choice([n for n in self.fleet if F.IDLE in n.gpus])
            index = healthy.gpus.index(F.IDLE)
            fault.target, fault.ends = f"{healthy.name}/gpu-{index}", now + self._lasting(10, 20)
            self.agents.sicken(healthy.name, index, True)
        self.fault = fault

    def _lose_lease(self) -> None:
        try:
            self.kube.delete(LEASE)
        except (OSError, KubeError):
            pass  # the API server stopped meanwhile: not lost this time

    def _lasting(self, low: float, high: float) -> float:
        """A fault's seconds: drawn within [low, high], at most the settings' longest."""
        return min(self.rng.uniform(low, high), self.s.fault_max_s)

    def _end_fault(self, now: float) -> None:
        fault = self.fault
        if fault is None:
            return
        kind, target = fault.kind, fault.target
        if kind == "replica_kill":
            self.replicas[target] = self._replica(target)
        elif kind == "replica_stop":
            signal_tree(self.replicas[target].popen.pid, signal.SIGCONT)
            self.stopped.discard(target)
        elif kind == "relay_kill":
            self.relays[target] = self._relay(target)
        elif kind == "relay_stop":
            signal_tree(self.relays[target].popen.pid, signal.SIGCONT)
            self.stopped.discard(target)
        elif kind in ("apiserver_stop", "etcd_stop"):
            signal_tree(self._plane_pid(target), signal.SIGCONT)
        elif kind == "clock_step":
            self.agents.step(target, 0.0)
        elif kind == "etcd_restart":
            old = self._plane_process("etcd")
            argv = old.popen.args
            assert isinstance(argv, list)  # (start_process gives it a list)
            self.plane.processes[self.plane.processes.index(old)] = start_process("etcd", argv, old.log_path)
        elif kind == "agent_kill":
            self.agents.kill(target, False)
        elif kind == "agent_stop":
            self.agents.pause(target, False)
        elif kind == "lease_lost_writing":
            node, _, gpu = target.partition("/gpu-")
            self.agents.sicken(node, int(gpu), False)
        fault.ended = now
        fault.index = len(self.report.faults)
        self.fault = None
        self.last_fault_end = now
        self.recovering.append(fault)
        self.report.faults.append(
            {
                "kind": kind,
                "target": target,
                "at_s": round(fault.started - self.started, 1),
                "for_s": round(now - fault.started, 1),
            }
        )
        self.next_fault_at = now + self.rng.uniform(*self.s.fault_gap_s)

    @staticmethod
    def _kill(proc: Proc) -> None:
        """SIGKILL to the process and its children (a container killed takes its ingest workers)."""
        signal_tree(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait(10)

    def _plane_process(self, name: str) -> Process:
        return next(p for p in self.plane.processes if p.name == name)

    def _plane_pid(self, name: str) -> int:
        return self._plane_process(name).popen.pid

    def _serve_elsewhere(self, x: str) -> None:
        """A Service drops a replica that stopped answering: the address moves to the other."""
        if self.serving == x:
            other = "b" if x == "a" else "a"
            self.service.move_to(self.ports[other]["http"])
            self.serving = other

    def _supervise(self) -> None:
        """Restart kube-scheduler if it exited (its Lease lost while the API server was stopped);
        point the address back at a replica that is whole again, round and round."""
        if self.scheduler.popen.poll() is not None:
            self.report.scheduler_restarts += 1
            self.scheduler = self._scheduler()
        if self.serving in self.stopped or not self.replicas[self.serving].alive():
            other = "b" if self.serving == "a" else "a"
            if self.replicas[other].alive() and other not in self.stopped:
                self._serve_elsewhere(self.serving)

    def _recoveries(self, now: float) -> None:
        for fault in list(self.recovering):
            assert fault.ended is not None
            if self.fault is not None and self.fault.kind != "cut":
                continue  # another fault is on: measured once it is over too
            if self._whole("a") and self._whole("b") and self._agree():
                self.report.faults[fault.index]["recovered_s"] = round(now - fault.ended, 2)
                self.recovering.remove(fault)
            elif now - fault.ended > RECOVER_S:
                self.report.violations["not_recovered"].append(f"{fault.kind} {fault.target}: not in {RECOVER_S:g} s")
                self.recovering.remove(fault)

    # -- invariants --

    def _quiet(self, now: float) -> bool:
        return self.fault is None and not self.recovering and now - self.last_fault_end >= GRACE_S

    def _check(self, pods: list[dict[str, Any]], now: float) -> None:
        self.report.checks += 1
        t = round(now - self.started, 1)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        bound: dict[str, int] = {}
        for p in live:
            if node := p["spec"].get("nodeName"):
                bound[node] = bound.get(node, 0) + _gpus(p)
        v = self.report.violations
        for node, gpus in bound.items():
            if gpus > self.nodes[node].at_most():
                v["misplaced"].append(
                    f"t={t}: {node} holds {gpus} GPUs of pods, had at most {self.nodes[node].at_most()}"
                )
        groups: dict[str, list[dict[str, Any]]] = {}
        for p in live:
            if g := p["metadata"].get("labels", {}).get("leaderworkerset.sigs.k8s.io/name"):
                groups.setdefault(g, []).append(p)
        for g, members in groups.items():
            cliques = {self.nodes[p["spec"]["nodeName"]].clique for p in members if p["spec"].get("nodeName")}
            if len(cliques) > 1:
                v["split"].append(f"t={t}: group {g} in {sorted(cliques)}")
        if self.dra:
            self._claims(live, now, t)
        if self._quiet(now):
            self._stuck(live, bound, groups, t)
            agree = self._agree()
            if agree:
                self.disagree_since = None
            elif self.disagree_since is None:
                self.disagree_since = now
            elif now - self.disagree_since > AGREE_S:
                v["disagree"].append(f"t={t}: the replicas' answers differ for over {AGREE_S:g} s")
                self.disagree_since = None

    def _stuck(
        self, live: list[dict[str, Any]], bound: dict[str, int], groups: dict[str, list[dict[str, Any]]], t: float
    ) -> None:
        room = {n.name: n.sure() - bound.get(n.name, 0) for n in self.plugin}
        for p in live:
            if p["spec"].get("nodeName") or p["spec"].get("resourceClaims"):
                continue  # (claim pods: _claims)
            age = time.time() - _created(p)
            if age < STUCK_S:
                continue
            name, need = p["metadata"]["name"], _gpus(p)
            group = p["metadata"].get("labels", {}).get("leaderworkerset.sigs.k8s.io/name")
            if group is None:
                fits = [n for n, left in room.items() if left >= need]
            else:
                members = groups.get(group, [])
                placed = {self.nodes[m["spec"]["nodeName"]].clique for m in members if m["spec"].get("nodeName")}
                waiting = sum(1 for m in members if not m["spec"].get("nodeName"))
                fits = [
                    c
                    for c, nodes in F.cliques(self.plugin).items()
                    if (not placed or c in placed) and sum(max(room[n.name], 0) // need for n in nodes) >= waiting
                ]
            if fits:
                self.report.violations["stuck"].append(
                    f"t={t}: {name} ({need} GPUs) pending {age:.0f} s; room on {fits[:3]}"
                )

    def _claims(self, live: list[dict[str, Any]], now: float, t: float) -> None:
        """DRA: no claim holds a device of a GPU busy or unhealthy (flapping ones may have been idle);
        no claim pod pending while a node has room for it on devices always good and unclaimed."""
        try:
            claims = self.kube.request("GET", f"{DRA}/namespaces/{self.ns}/resourceclaims", timeout=3)["items"]
        except (OSError, KubeError):
            return
        taken: dict[str, set[int]] = {}
        for c in claims:
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                node, index = r["pool"], int(r["device"].rpartition("-")[2])
                taken.setdefault(node, set()).add(index)
                state = self.nodes[node].gpus[index]
                if state in (F.BUSY, F.SICK):
                    self.report.violations["misplaced"].append(
                        f"t={t}: claim {c['metadata']['name']} holds {node}/gpu-{index}, {state}"
                    )
        if not self._quiet(now):
            return
        room = {
            n.name: sum(1 for i, g in enumerate(n.gpus) if g == F.IDLE and i not in taken.get(n.name, ()))
            for n in self.dra
        }
        for p in live:
            if p["spec"].get("nodeName") or not p["spec"].get("resourceClaims"):
                continue
            age, need = time.time() - _created(p), _claim_gpus(p)
            fits = [n for n, left in room.items() if left >= need]
            if age >= STUCK_S and fits:
                self.report.violations["stuck"].append(
                    f"t={t}: {p['metadata']['name']} (a claim of {need}) pending {age:.0f} s; room on {fits[:3]}"
                )

    def _rules_match(self, v: list[str]) -> None:
        """Our DeviceTaintRules are the agents' state, once the pods are gone: one per unhealthy GPU
        (gpu-extender.<node>.<device>) and per GPU busy outside Kubernetes (gpu-extender-busy...),
        none on an idle one (a flapping one may have either)."""
        must, may = set(), set()
        for n in self.dra:
            for i, state in enumerate(n.gpus):
                device = f"gpu-{i}"
                if state == F.SICK:
                    must.add(rule_name(n.name, device))
                elif state == F.BUSY:
                    must.add(rule_name(n.name, device, BUSY_PREFIX))
                elif state == F.FLAP:
                    may.add(rule_name(n.name, device, BUSY_PREFIX))
        seen: set[str] = set()

        def match() -> bool:
            seen.clear()
            listed = self.kube.get(f"{RULES}?labelSelector=app.kubernetes.io/managed-by%3Dgpu-extender")["items"]
            seen.update(r["metadata"]["name"] for r in listed)
            return must <= seen <= must | may

        try:
            self._wait("our DeviceTaintRules as the agents say", match, 60)
        except RuntimeError:
            v.append(f"rules: missing {sorted(must - seen)}, not wanted {sorted(seen - must - may)}")

    def _sample(self, now: float) -> None:
        procs: dict[str, int] = {f"replica-{x}": p.popen.pid for x, p in self.replicas.items() if p.alive()}
        procs |= {f"relay-{r}": p.popen.pid for r, p in self.relays.items() if p.alive()}
        procs["kube-scheduler"] = self.scheduler.popen.pid
        procs["kube-apiserver"] = self._plane_pid("kube-apiserver")
        procs["harness"] = os.getpid()
        for name, pid in procs.items():
            got = rss_and_fds(pid, children=name != "harness")  # (the harness started every other)
            if got is not None:
                self.samples.setdefault(f"{name}:{pid}", []).append((now - self.started, got[0], got[1]))

    # -- the end --

    def _finish(self) -> None:
        """Every pod deleted; then nothing may be left held on either replica, and each node's
        GPUsUsable condition must say what its agents say."""
        v = self.report.violations["end"]
        for proc in list(self.stopped):
            pid = self.replicas[proc].popen.pid if proc in self.replicas else self.relays[proc].popen.pid
            signal_tree(pid, signal.SIGCONT)
        self.kube.delete_pods(self.ns)
        self._wait("every pod gone", lambda: not self._pods(), 60)
        left: dict[str, dict[str, float]] = {}

        def drained() -> bool:
            for x in ("a", "b"):
                samples = self._scrape(x)
                left[x] = {
                    name: metric(samples, name) or 0.0
                    for name in (
                        "gpu_extender_bindings_open",
                        "gpu_extender_groups_held",
                        "gpu_extender_group_members_held",
                    )
                }
            return all(value == 0 for values in left.values() for value in values.values())

        try:
            self._wait("holds and open bindings drained", drained, 90)
        except RuntimeError:
            v.append(f"not drained: {left}")
        for x in ("a", "b"):
            self.report.loop_lag_max_s[x] = metric(self._scrape(x), "gpu_extender_event_loop_lag_max_seconds") or 0.0
        # No GPU usable only where every GPU is unhealthy: the agents read no kubelet here, so a busy
        # GPU may be a pod's (its holders unknown), and is never counted unusable for being busy.
        expected = {n.name: "False" if n.gpus.count(F.SICK) == F.GPUS else "True" for n in self.plugin}
        wrong: dict[str, str] = {}

        def conditions() -> bool:
            wrong.clear()
            for name, want in expected.items():
                conds = self.kube.get(f"/api/v1/nodes/{name}")["status"].get("conditions") or []
                got = next((c["status"] for c in conds if c["type"] == "GPUsUsable"), "missing")
                if got != want:
                    wrong[name] = f"{got}, want {want}"
            return not wrong

        try:
            self._wait("every node's GPUsUsable as its agents say", conditions, 60)
        except RuntimeError:
            v.append(f"conditions: {wrong}")
        if self.dra:
            self._rules_match(v)
        self.report.agents = {
            "accepted": self.agents.accepted,
            "refused": self.agents.refused,
            "reconnects": self.agents.reconnects,
        }
        self.agents.stop()
        for key, points in self.samples.items():
            after = [p for p in points if p[0] >= self.s.warmup_s]
            if not after:
                continue
            half = (after[0][0] + after[-1][0]) / 2
            self.report.memory[key] = {
                "rss_mib": round(after[-1][1], 1),
                "rss_mib_per_hour": round(slope_per_hour([(p[0], p[1]) for p in after]), 1),
                "rss_mib_per_hour_last_half": round(slope_per_hour([(p[0], p[1]) for p in after if p[0] >= half]), 1),
                "fds": after[-1][2],
                "fds_per_hour": round(slope_per_hour([(p[0], float(p[2])) for p in after]), 1),
                "seconds": round(after[-1][0] - after[0][0], 1),
            }
        by_kind: dict[str, list[float]] = {}
        for f in self.report.faults:
            if "recovered_s" in f:
                by_kind.setdefault(f["kind"], []).append(f["recovered_s"])
        for kind, values in sorted(by_kind.items()):
            values.sort()
            self.report.recovery[kind] = {
                "n": len(values),
                "p50": values[len(values) // 2],
                "p99": values[min(len(values) - 1, round(0.99 * (len(values) - 1)))],
                "max": values[-1],
            }


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) for c in pod["spec"]["containers"]
    )


def _agent_uuid(node: str, minor: int) -> str:
    """What the simulated agent names a GPU (tests/kube/groups.node_report): the device's uuid."""
    return f"GPU-{node}-{minor}"


def _claim_gpus(pod: dict[str, Any]) -> int:
    """A claim pod's GPUs: its template's count (gpus-<k>)."""
    return sum(
        int(str(c.get("resourceClaimTemplateName", "gpus-0")).rpartition("-")[2])
        for c in pod["spec"].get("resourceClaims") or []
    )


def _created(pod: dict[str, Any]) -> float:
    stamp = pod["metadata"].get("creationTimestamp")
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) if stamp else time.time()


def soak(settings: Settings, workdir: Path, progress: Callable[[str], None] = print) -> Report:
    folder = assets()
    if folder is None:
        raise RuntimeError(skip_reason() or "no control plane binaries")
    plane = ControlPlane(workdir / "plane", folder)
    try:
        kube = plane.start()
        kube.create_namespace("gpu-extender")
        install_crds(kube)
        ca = trustme.CA(organization_name="soak")
        ns = "soak"
        kube.create_namespace(ns)
        world_dir = workdir / "world"
        world_dir.mkdir()
        with scene(plane, kube, ns, world_dir, ca) as world:
            run = Soak(plane, kube, world, settings)
            run.setup()
            progress(f"soak: {settings.nodes} nodes, seed {settings.seed}, {settings.minutes:g} min; running")
            report = run.run()
            for name in PRIORITIES:
                kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{ns}-{name}", grace_seconds=None)
            for f in (*run.to_replica.values(), *run.to_relay.values(), run.service):
                f.close()
        return report
    finally:
        plane.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=24)
    p.add_argument("--json", type=Path, default=None, help="write the report here too")
    p.add_argument("--keep", type=Path, default=None, help="run in this new folder and keep it (every log)")
    p.add_argument("--faults", default=",".join(FAULTS), help="the fault kinds drawn from (default: all)")
    p.add_argument(
        "--spare", default="", help="replicas (a, b) and relays (r1, r2) never killed or stopped, comma-separated"
    )
    args = p.parse_args(argv)
    # SIGTERM (timeout, a CI's cancel) ends the run through its `finally`s: the control plane and every
    # process it started are stopped, none left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    if unknown := sorted(set(faults) - set(FAULTS)):
        p.error(f"--faults: unknown {unknown}; known: {', '.join(FAULTS)}")
    spare = tuple(x.strip() for x in args.spare.split(",") if x.strip())
    if unknown := sorted(set(spare) - {*REPLICAS, *RELAYS}):
        p.error(f"--spare: unknown {unknown}; known: {', '.join((*REPLICAS, *RELAYS))}")
    settings = Settings(minutes=args.minutes, seed=args.seed, nodes=args.nodes, faults=faults, spare=spare)
    if not drawable(settings):
        p.error("--faults/--spare: no fault kind left with a target")
    if (reason := skip_reason()) is not None:
        print(f"soak: {reason}", file=sys.stderr)
        return 2
    if args.keep is not None:
        args.keep.mkdir(parents=True)
        report = soak(settings, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            report = soak(settings, Path(tmp))
    text = json.dumps(asdict(report), indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
