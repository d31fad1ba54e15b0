"""gpu-extender's settings: one object, nested per subsystem (the scheduler API, agent auth, TLS),
built once from the command line (flags.py) and passed down. Types and defaults only: every
stage may read it, it imports none of them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuextender.common.cpus import usable_cpus
from gpuextender.common.idle_rule import IdleRule
from gpuextender.common.netaddr import HostPort
from gpuextender.common.tls_files import ServingTlsFiles

# Above the agents' --resolve-interval (15 s) and reconnect backoff (5 s), with room to spare.
DEFAULT_READINESS_GRACE_S = 30.0
# kube-scheduler's own floor for the nodes it scores (minFeasibleNodesToFind).
DEFAULT_SHORTLIST = 100
# A binding arrives within milliseconds through the bind verb, tens of them through the watch; a
# pod whose cycle ends without one holds the next GPU pod's filter this long at most.
DEFAULT_BINDING_WAIT_S = 0.5
MAX_BINDING_WAIT_S = 1.5  # the shipped httpTimeout is 2 s: the wait plus the decision must fit

# kube-scheduler sends at most every node of the cluster (all of them with percentageOfNodesToScore
# 100; by default ~5 % of a large one, 1,000 of 20,000). Upstream Kubernetes supports 5,000 nodes,
# managed offerings 15,000 to 65,000; the largest GPU fleets are 100,000-200,000 GPUs, 12,500 to
# 25,000 nodes of 8 (issue 36), and refusing a real cluster's call would stall every GPU pod, so
# the bound is the top of that. filter and prioritize cost ~0.7 / ~2.3 us per unknown name
# (bench/bench_hostile_http.py, 2026-11-28, a slow hour of the 2-core VM): 25,000 held the loop
# 16.6 / 58.6 ms. Larger clusters raise it.
MAX_CANDIDATES = 25_000
# A sample_time further than this from the extender's wall clock is refused (--max-clock-skew): NTP
# keeps nodes within milliseconds, so 30 s means a broken or stepped clock. Freshness is judged on
# the extender's own clock (receipt), so any skew within the bound is harmless.
MAX_CLOCK_SKEW_S = 30.0
# Nodes outside the inventory whose reports are kept (--max-unknown-nodes): room for agents that
# start before their Node is listed; 64 maximal reports are ~10 MB on the wire.
MAX_UNKNOWN_NODES = 64
# Ingest workers (--ingest-workers): by default one per CPU the extender may use, less one for the
# main process (the scheduler's calls and storing what the workers relay), at most 8: 20,000
# gated nodes send ~6,700 reports/s, which a few workers carry (bench/RESULTS.md, Sizing).
AUTO_INGEST_WORKERS_MAX = 8
MAX_INGEST_WORKERS = 64


def is_taint_key(key: str) -> bool:
    return bool(_TAINT_KEY.fullmatch(key)) and len(key.rpartition("/")[2]) <= 63


def auto_ingest_workers(cpus: int) -> int:
    return max(1, min(AUTO_INGEST_WORKERS_MAX, cpus - 1))


# What other schedulers and autoscalers see (issue 35). A GPU busy outside Kubernetes is tainted
# after this long busy without a break, and untainted after this long idle or held: NVML's
# utilization is the share of the last sample period (1/6 to 1 s) a kernel ran, so a serving
# process between requests, or a job loading data or writing a checkpoint, reads idle for seconds
# to tens of seconds; a pod's process exiting frees its memory within seconds. 60 s spans those and
# 12 samples at the agents' 5 s, and bounds a flapping GPU to one write a minute.
DEFAULT_BUSY_HOLD_S = 60.0
# A GPU healthy again keeps its health rule (and its device-plugin node's mark) this long without a
# break: a GPU whose health flaps (an XID storm cleared and back, a link lost and found) is written
# once a hold at most, as a busy one is, and is not offered to other schedulers between two faults.
DEFAULT_HEALTH_CLEAR_S = 60.0
MIN_BUSY_HOLD_S = 1.0  # below an agent's sample, a hold holds nothing back
MAX_HOLD_S = 3600.0
# API writes per second for taint rules, node taints and conditions: 5,000 nodes x 8 GPUs with 2 %
# changing a minute is ~13 changes a second (bench/bench_publish.py); kube-apiserver's default
# client QPS for a controller is 20 (--kube-api-qps of kube-controller-manager).
DEFAULT_WRITES_PER_S = 20.0
DEFAULT_NODE_TAINT_KEY = "gpu-extender.io/no-usable-gpu"
# A taint key is a label key: [a DNS subdomain prefix/]a name of at most 63 characters.
_TAINT_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
TAINT_KEY_FORM = "[prefix/]name: a DNS subdomain prefix, a name of at most 63 letters, digits, '-', '_', '.'"
# --cleanup-on-exit: the leader's removal of its writes on SIGTERM stops after this long, within the
# Pod's terminationGracePeriodSeconds (30 s by default) with room for the rest of the shutdown;
# what is left is logged (`gpu-extender cleanup` removes it).
CLEANUP_ON_EXIT_TIMEOUT_S = 20.0
# GPUs held yet idle this long without a break are a reclaim signal (--idle-window): a model
# server between bursts of traffic or a notebook between cells is idle for minutes; half an hour
# of nothing is what a platform team asks about.
DEFAULT_IDLE_WINDOW_S = 1800.0
MIN_IDLE_WINDOW_S = 10.0  # two agent samples at 5 s; a window is one Event per object at most
MAX_IDLE_WINDOW_S = 7 * 86_400.0
MAX_WRITES_PER_S = 1000.0
# Reclaim (--reclaim, issue 51 item 6): a pod is evicted for its idle GPUs only after it has run
# this long (--reclaim-min-runtime): a job still loading a model or its data reads idle for minutes.
DEFAULT_RECLAIM_MIN_RUNTIME_S = 1800.0
MIN_RECLAIM_MIN_RUNTIME_S = 60.0  # under a minute, a pod that just started could go before it began
MAX_RECLAIM_MIN_RUNTIME_S = 7 * 86_400.0
# The namespaces whose pods reclaim may evict carry this label (an operator's choice, never a default).
RECLAIM_LABEL = ("gpu-extender.io/reclaim", "enabled")
RECLAIM_MODES = ("off", "dry-run", "on")

# Bounds on one scheduler call; why these values: the --max-body-bytes and --body-read-timeout help.
DEFAULT_MAX_BODY_BYTES = 2 * 1024**2
DEFAULT_BODY_READ_TIMEOUT_S = 10.0

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


DEFAULT_GROUP_LEVEL = "nvidia.com/gpu.clique"  # GPU Feature Discovery's / the DRA driver's NVLink domain
# A group's room is held this long without a member binding: kube-scheduler places a group's
# members seconds apart (a pull of a large image happens after binding, so it does not count), and
# a group that cannot make progress in 5 minutes should not keep a domain from others.
DEFAULT_GROUP_HOLD_S = 300.0
MAX_GROUP_HOLD_S = 3600.0
# Groups one namespace may have held at once (issue 53): any user who may create pods can hold a
# domain by naming a group whose other members never come; the cap keeps one namespace from
# holding the fleet (a namespace's groups past it wait, others' are placed as before). Far above a
# namespace's groups in flight at once (each is held only until its members are bound).
DEFAULT_GROUP_MEMBERS_GRACE_S = 60.0  # a group's members all exist as pods this long after its hold began
MAX_GROUP_MEMBERS_GRACE_S = 3600.0
DEFAULT_GROUPS_PER_NAMESPACE = 100
MAX_GROUPS = 10_000  # groups held at once in all (each plan ~1 KiB with its holds: ~10 MiB at the bound)


@dataclass(frozen=True, slots=True)
class DecisionPolicy:
    """What a decision does with data it cannot take at face value (decide/README.md): how old a
    report may be and still count, what stale data means, and what happens when no node fits."""

    stale_after_s: float = 10.0
    stale_policy: str = "fail-open"  # or "fail-closed"
    no_fit_policy: str = "pass-all"  # or "reject"


@dataclass(frozen=True, slots=True)
class ApiSettings:
    policy: DecisionPolicy
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    compact_priorities: bool = True
    shortlist: int = (
        DEFAULT_SHORTLIST  # filter answers at most this many passing nodes, the best (decide/decision.py); 0: all
    )
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_candidates: int = MAX_CANDIDATES
    body_read_timeout_s: float = DEFAULT_BODY_READ_TIMEOUT_S
    path_prefix: str = ""
    default_class_policy: str = "FirstAvailable"
    runtime_check: str = "warn"  # enforce | warn | off
    node_strategy: str = "spread"  # model/pod_request.NODE_STRATEGIES; a pod annotation may pick another
    random_seed: str = ""
    readiness_grace_s: float = (
        DEFAULT_READINESS_GRACE_S  # /readyz waits up to this long for every GPU node's agent data
    )
    fleet_page: bool = True  # GET /ui, /ui/fleet.json, POST /ui/explain (ui/fleet_page.py); False: not routed
    # How long a filter waits for earlier pods' bindings (scheduler/binding_gate.py); 0: not at all. Only
    # meaningful where bindings are seen (--kubernetes: the pod watch, the bind verb).
    binding_wait_s: float = 0.0
    # Multi-pod groups (decide/group_domains.py): the node labels that name a domain, tried in order
    # ("" for any nodes), and how long a group's room is held without a member binding.
    group_levels: tuple[str, ...] = (DEFAULT_GROUP_LEVEL,)
    # --group-topology-policy preferred: a group that names no key of its own and that no domain holds
    # is placed whole across domains (its levels end with "any nodes").
    group_preferred: bool = False
    group_hold_s: float = DEFAULT_GROUP_HOLD_S
    # A hold is released when fewer of its group's members than its size exist as pods this long
    # after it began (state/pending_members.py; --kubernetes only).
    group_members_grace_s: float = DEFAULT_GROUP_MEMBERS_GRACE_S
    groups_per_namespace: int = DEFAULT_GROUPS_PER_NAMESPACE  # groups held at once per namespace


@dataclass(frozen=True, slots=True)
class ServiceAccountRef:
    namespace: str
    name: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_service_account(text: str) -> ServiceAccountRef:
    namespace, sep, name = text.strip().partition("/")
    if not sep or not _DNS_LABEL.match(namespace) or not _DNS_SUBDOMAIN.match(name):
        raise ValueError(f"{text!r}: expected NAMESPACE/NAME of a ServiceAccount (e.g. gpu-extender/gpu-agent)")
    return ServiceAccountRef(namespace, name)


@dataclass(frozen=True, slots=True)
class AgentAuth:
    mode: str  # none | tokenreview
    service_account: ServiceAccountRef | None = None
    audience: str = "gpu-extender"
    reauth_after_s: float = 600.0  # agent connections end after this long: the agent re-authenticates
    # Relays (extender/relay/) whose tokens belong to this account may forward agents' reports.
    relay_service_account: ServiceAccountRef | None = None


@dataclass(frozen=True, slots=True)
class PublishSettings:
    """What the device-taint writer publishes besides health rules (issue 35; flags.py's help)."""

    busy_taints: bool = True
    busy_hold_s: float = DEFAULT_BUSY_HOLD_S
    node_conditions: bool = True
    node_taint: bool = False
    node_taint_key: str = DEFAULT_NODE_TAINT_KEY
    node_taint_effect: str = "NoSchedule"
    writes_per_s: float = DEFAULT_WRITES_PER_S
    idle_window_s: float = DEFAULT_IDLE_WINDOW_S
    idle_events: bool = True
    reclaim: str = "off"  # RECLAIM_MODES: evict idle holders for waiting GPU pods (the leader)
    reclaim_min_runtime_s: float = DEFAULT_RECLAIM_MIN_RUNTIME_S
    # On SIGTERM the leader removes its rules, conditions and node taint before it gives up the Lease.
    cleanup_on_exit: bool = False


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    http_addr: HostPort
    grpc_addr: HostPort
    inventory: Path | None
    kubernetes: bool
    kubeconfig: Path | None
    idle_rule: IdleRule
    api: ApiSettings
    requested_agent_interval_ms: int
    forget_after_s: float
    log_level: str
    tls: ServingTlsFiles | None = None
    agent_auth: AgentAuth = AgentAuth("none")
    max_clock_skew_s: float = MAX_CLOCK_SKEW_S
    max_unknown_nodes: int = MAX_UNKNOWN_NODES
    ingest_in_process: bool = False
    # processes serving the agents' port (flags: --ingest-workers; auto: from the CPUs, as here)
    ingest_workers: int = field(default_factory=lambda: auto_ingest_workers(usable_cpus()))
    log_format: str = "text"
    # DRA device taints from agent health (issue 25): written with --kubernetes unless "off".
    device_taints: str = "on"
    device_taint_after_s: float = 3.0  # a GPU is bad this long before its device is tainted
    device_taint_clear_after_s: float = DEFAULT_HEALTH_CLEAR_S  # ... and healthy this long before it is not
    leader_namespace: str = "gpu-extender"  # where the replicas' Leases live
    publish: PublishSettings = field(default_factory=lambda: PublishSettings())
    # The other replicas, told of this one's open bindings (scheduler/peer_sender.py; --peers):
    # each HOST:PORT resolved to all its addresses; () for none.
    peers: tuple[HostPort, ...] = ()
    peers_ca: Path | None = None  # over HTTPS: the CA the peers' certificates are checked against
    # Settings that came from the environment or the config file (dest -> source), for the start-up log.
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def token_review(self) -> bool:
        """Agents' tokens are reviewed by the API server (ingest/token_review.reviewer_for builds it)."""
        return self.kubernetes and self.agent_auth.mode == "tokenreview"
