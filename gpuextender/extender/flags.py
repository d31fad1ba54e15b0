"""gpu-extender's command line: flags over GPU_EXTENDER_* variables over --config's file over
defaults (common/layered_config.py), checked and built into one settings.ExtenderConfig."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuextender.common.cli import HelpFormatter, add_version
from gpuextender.common.cpus import usable_cpus
from gpuextender.common.idle_rule import DEFAULT_MAX_SM_ACTIVE_PERCENT, IdleRule
from gpuextender.common.layered_config import SettingsError, epilog, parse_layered
from gpuextender.common.logs import FORMATS, LEVELS
from gpuextender.common.netaddr import AddressError, HostPort, parse_host_port
from gpuextender.common.tls_files import CredentialFileError, ServingTlsFiles, check_readable
from gpuextender.extender.model.pod_group import topology_problem
from gpuextender.extender.settings import (
    CLEANUP_ON_EXIT_TIMEOUT_S,
    DEFAULT_BINDING_WAIT_S,
    DEFAULT_BODY_READ_TIMEOUT_S,
    DEFAULT_BUSY_HOLD_S,
    DEFAULT_GROUP_HOLD_S,
    DEFAULT_GROUP_LEVEL,
    DEFAULT_GROUP_MEMBERS_GRACE_S,
    DEFAULT_GROUPS_PER_NAMESPACE,
    DEFAULT_HEALTH_CLEAR_S,
    DEFAULT_IDLE_WINDOW_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_NODE_TAINT_KEY,
    DEFAULT_READINESS_GRACE_S,
    DEFAULT_RECLAIM_MIN_RUNTIME_S,
    DEFAULT_SHORTLIST,
    DEFAULT_WRITES_PER_S,
    MAX_BINDING_WAIT_S,
    MAX_CANDIDATES,
    MAX_CLOCK_SKEW_S,
    MAX_GROUP_HOLD_S,
    MAX_GROUP_MEMBERS_GRACE_S,
    MAX_GROUPS,
    MAX_HOLD_S,
    MAX_IDLE_WINDOW_S,
    MAX_INGEST_WORKERS,
    MAX_RECLAIM_MIN_RUNTIME_S,
    MAX_UNKNOWN_NODES,
    MAX_WRITES_PER_S,
    MIN_BUSY_HOLD_S,
    MIN_IDLE_WINDOW_S,
    MIN_RECLAIM_MIN_RUNTIME_S,
    RECLAIM_LABEL,
    RECLAIM_MODES,
    TAINT_KEY_FORM,
    AgentAuth,
    ApiSettings,
    DecisionPolicy,
    ExtenderConfig,
    PublishSettings,
    ServiceAccountRef,
    auto_ingest_workers,
    is_taint_key,
    parse_service_account,
)

ENV_PREFIX = "GPU_EXTENDER_"


class ConfigError(ValueError):
    """A flag value is wrong; the message says which and why."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-extender",
        description=(
            "kube-scheduler extender that places GPU pods on nodes whose GPUs are really idle. "
            "gpu-agents stream live NVML data to --grpc-addr; kube-scheduler calls POST /filter "
            "and /prioritize on --http-addr (configure it with nodeCacheCapable: true). "
            "`gpu-extender explain FILE|--pod NAMESPACE/NAME` asks a running extender why it decides as it does."
        ),
        formatter_class=HelpFormatter,
        epilog=epilog(ENV_PREFIX, "--stale-after", "20"),
    )
    add_version(p)
    p.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="YAML file of settings: the long flags without '--' as keys (stale-after: 20, "
        "gpu-resource: [nvidia.com/gpu]); flags and GPU_EXTENDER_* variables override it",
    )
    g = p.add_argument_group("serving", "where it listens: the scheduler API and the agents' streams")
    g.add_argument(
        "--http-addr", default="0.0.0.0:8888", metavar="HOST:PORT", help="scheduler API, /healthz, /readyz, /metrics"
    )
    g.add_argument("--grpc-addr", default="0.0.0.0:9090", metavar="HOST:PORT", help="where agents stream reports")
    g.add_argument(
        "--path-prefix",
        default="",
        metavar="PATH",
        help="serve the verbs under PATH (urlPrefix http://host:port/PATH in the scheduler config)",
    )
    g = p.add_argument_group(
        "inventory", "where Nodes, OME objects and DRA's objects come from, and which resources are GPUs"
    )
    g.add_argument(
        "--inventory",
        type=Path,
        metavar="PATH",
        help="read Nodes and OME objects (AcceleratorClass, ServingRuntime, ...) from this YAML "
        "file or directory instead of a cluster; reloaded when it changes. A file that is empty, "
        "half-written or holds no Kubernetes objects keeps its last good objects (delete the file "
        "to remove them)",
    )
    g.add_argument(
        "--kubernetes",
        action="store_true",
        help="list+watch Nodes and OME objects from the API server (in-cluster config, or "
        "--kubeconfig / $KUBECONFIG / ~/.kube/config)",
    )
    g.add_argument("--kubeconfig", type=Path, metavar="PATH", help="kubeconfig for --kubernetes")
    g.add_argument(
        "--gpu-resource",
        action="append",
        default=[],
        metavar="NAME",
        help="extended resource counted as GPUs; repeatable (default: nvidia.com/gpu). A name "
        "nvidia.com/mig-<profile> (GFD's mixed MIG strategy) is matched to free MIG devices of "
        "that profile instead, e.g. --gpu-resource nvidia.com/gpu --gpu-resource "
        "nvidia.com/mig-1g.10gb",
    )
    g = p.add_argument_group(
        "decisions", "the idle rule, stale data, what to answer when nothing fits, how nodes and classes are ranked"
    )
    g.add_argument(
        "--idle-max-utilization",
        type=float,
        default=30.0,
        metavar="PERCENT",
        help="a GPU is idle only below this utilization",
    )
    g.add_argument(
        "--idle-max-memory",
        type=float,
        default=50.0,
        metavar="PERCENT",
        help="... and below this share of its memory used",
    )
    g.add_argument(
        "--idle-max-sm-active",
        default=f"{DEFAULT_MAX_SM_ACTIVE_PERCENT:g}",
        metavar="PERCENT|off",
        help="judge a GPU that reports GPM SM activity (Hopper and later, through an agent of 0.5 or "
        "later) by it instead of its utilization: idle only below this share of SMs busy. "
        "Utilization counts a GPU busy while any kernel runs, so one spinning thread reads 100 %%; "
        "SM activity says how much of the GPU is in use. GPUs without GPM keep "
        "--idle-max-utilization; the memory rule applies to both. off: utilization decides on "
        "every GPU (default: %(default)s; measured on an H100: one spinning thread under 1 %%, "
        "matrix products over 90 %%)",
    )
    g.add_argument(
        "--stale-after", type=float, default=10.0, metavar="SECONDS", help="a node's GPU data older than this is stale"
    )
    g.add_argument(
        "--stale-policy",
        choices=("fail-open", "fail-closed"),
        default="fail-open",
        help="fail-open: judge a stale node on assumed data, as one without data: its allocatable GPUs "
        "(less those last seen unhealthy and its bound pods) counted as just enough, never as all idle, "
        "and passed only when no node with fresh data fits; fail-closed: reject the node (StaleGPUData)",
    )
    g.add_argument(
        "--no-fit-policy",
        choices=("pass-all", "reject"),
        default="pass-all",
        help="when no node has enough idle GPUs: pass-all lets kube-scheduler choose among the "
        "busy/stale nodes; reject keeps them rejected (the pod waits)",
    )
    g.add_argument(
        "--prioritize-answer",
        choices=("compact", "full"),
        default="compact",
        help="compact: subtract the lowest score and omit zeros (same ranking, smaller answer); "
        "full: every node with its 0-10 score",
    )
    g.add_argument(
        "--shortlist",
        type=int,
        default=DEFAULT_SHORTLIST,
        metavar="N",
        help="filter answers at most the N best nodes (by prioritize's score) of those that pass a GPU "
        "pod; the others pass but are left out, so kube-scheduler scores and sends back only N nodes. "
        "Like its own percentageOfNodesToScore (which keeps at least 100 nodes), but the best by GPU "
        "state instead of the first found. 0: answer every node that passes",
    )
    g.add_argument(
        "--default-class-policy",
        default="FirstAvailable",
        choices=("FirstAvailable", "BestFit", "Cheapest", "MostCapable"),
        help="AcceleratorClass policy for OME pods whose InferenceService names none",
    )
    g.add_argument(
        "--node-strategy",
        choices=("spread", "binpack", "cost", "random"),
        default="spread",
        help="how prioritize ranks nodes within a class (a pod's annotation gpu-extender.io/node-strategy "
        "overrides it): spread prefers the node with the most idle GPUs, binpack the fewest that still "
        "fit, cost the cheapest AcceleratorClass, random a seeded shuffle (formulas: docs/architecture.md, "
        "'Node strategies')",
    )
    g.add_argument(
        "--random-seed",
        default="",
        metavar="TEXT",
        help="seed for the random strategy (with the pod UID): same seed, same ranking",
    )
    g.add_argument(
        "--runtime-check",
        choices=("enforce", "warn", "off"),
        default="warn",
        help="OME pods whose serving runtime cannot serve their model (OME's ValidateRuntime): "
        "enforce fails every node (RuntimeIncompatible), warn logs and counts it",
    )
    g = p.add_argument_group("request limits", "bounds on what one scheduler call may ask")
    g.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="BYTES",
        help="largest request body accepted (413 above; 2 MiB by default). Sized from what "
        "kube-scheduler sends: with nodeCacheCapable: true ~22 B per node name (5,000 nodes: "
        "110 KiB), leaving room for a Pod as large as etcd stores (1.5 MiB). Full Node objects "
        "(nodeCacheCapable: false) are 3.5 KB each as captured, more with kubelet status: ~600 "
        "fit. Parsing holds the event loop (~15 ms per MiB of full Nodes); within 2 MiB no "
        "body holds it over 100 ms. Each 16 bytes of this limit also allow one JSON object "
        "or array in a body (real ones use ~33)",
    )
    g.add_argument(
        "--max-candidates",
        type=int,
        default=MAX_CANDIDATES,
        metavar="N",
        help="most candidate nodes in one filter/prioritize call (400 too_many_nodes above; "
        "/explain takes at most 5,000, ~6 us each): 25,000 GPU nodes of 8 are the largest GPU fleets "
        "(200,000 GPUs); filter+prioritize cost ~2 us per node on the event loop",
    )
    g.add_argument(
        "--body-read-timeout",
        type=float,
        default=DEFAULT_BODY_READ_TIMEOUT_S,
        metavar="SECONDS",
        help="a request body not complete this long after its headers gets 408 and the "
        "connection is closed (a stalled or hostile client must not hold it; kube-scheduler "
        "sends the whole body at once)",
    )
    g = p.add_argument_group("agents", "the agents' reports: sampling, readiness, forgetting")
    g.add_argument(
        "--requested-agent-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="ask agents to sample at this interval (0: leave it to the agents)",
    )
    g.add_argument(
        "--readiness-grace",
        type=float,
        default=DEFAULT_READINESS_GRACE_S,
        metavar="SECONDS",
        help="after start, /readyz stays 503 until every GPU node in the inventory has reported, "
        "for up to this long. A new or restarted replica has no GPU data: agents find it only at "
        "their next reconnect (backoff, at most ~5 s) or --resolve-interval (15 s), and until then "
        "every decision would rest on assumed data. The default stays above both; with no "
        "inventory the replica cannot tell which nodes to wait for and waits the whole grace. "
        "0 turns the wait off",
    )
    g.add_argument(
        "--forget-after",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="drop a node's GPU data after this long without reports (node gone)",
    )
    g = p.add_argument_group("security", "TLS for both ports; who may report for which node")
    g.add_argument(
        "--tls-cert",
        type=Path,
        metavar="PATH",
        help="serve HTTPS on --http-addr and TLS on --grpc-addr with this certificate (PEM, with "
        "--tls-key); reloaded when the file changes (cert-manager rotation)",
    )
    g.add_argument("--tls-key", type=Path, metavar="PATH", help="private key of --tls-cert (PEM)")
    g.add_argument(
        "--tls-ca",
        type=Path,
        metavar="PATH",
        help="mTLS on gRPC: agents must present a client certificate signed by this CA "
        "(needs --tls-cert/--tls-key; HTTPS stays server-auth only, for kubelet probes)",
    )
    g.add_argument(
        "--agent-auth",
        choices=("none", "tokenreview"),
        default="none",
        help="tokenreview: agents send a projected ServiceAccount token, checked with the API "
        "server's TokenReview when a stream opens; a token only reports for the node its pod "
        "runs on (needs --kubernetes and Kubernetes >= 1.30)",
    )
    g.add_argument(
        "--agent-service-account",
        metavar="NAMESPACE/NAME",
        help="the agents' ServiceAccount (required with --agent-auth tokenreview)",
    )
    g.add_argument(
        "--relay-service-account",
        metavar="NAMESPACE/NAME",
        help="with --agent-auth tokenreview: relays (`gpu-extender relay`, docs/relay.md) whose token "
        "belongs to this ServiceAccount may forward their agents' reports; unset, relays are refused",
    )
    g.add_argument(
        "--agent-token-audience",
        default="gpu-extender",
        metavar="AUD",
        help="audience the agents' projected tokens must be issued for",
    )
    g.add_argument(
        "--agent-reauth-interval",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --agent-auth: end each agent connection after this long (plus 30 s to finish), so "
        "the agent reconnects with its current token and a revoked one stops working",
    )
    g = p.add_argument_group("agent reports", "bounds on what agents may report, and where reports are taken in")
    g.add_argument(
        "--max-clock-skew",
        type=float,
        default=MAX_CLOCK_SKEW_S,
        metavar="SECONDS",
        help="refuse reports whose sample time is further than this from the extender's clock "
        "(a node clock stepped or drifting: fix NTP); 1 to 86400",
    )
    g.add_argument(
        "--max-unknown-nodes",
        type=int,
        default=MAX_UNKNOWN_NODES,
        metavar="N",
        help="with --inventory or --kubernetes: keep reports of at most N nodes the inventory does "
        "not know (agents starting before their Node is listed); reports for more are refused",
    )
    g.add_argument(
        "--ingest-in-process",
        action="store_true",
        help="serve the agents' gRPC port on the scheduler API's own event loop, in this process "
        "(~50 MiB less memory). By default a second process receives, validates and acks the "
        "reports and relays them, so scheduler calls do not queue behind bursts of agent reports",
    )
    g.add_argument(
        "--ingest-workers",
        default="auto",
        metavar="N|auto",
        help="processes that serve the agents' gRPC port together (the kernel spreads the agents' "
        "connections across them; one that dies or stops answering is started again). auto: the "
        f"CPUs this process may use (affinity and cgroup quota) less one, 1 to 8; N: 1 to {MAX_INGEST_WORKERS} "
        "(default: %(default)s)",
    )
    g = p.add_argument_group("bursts", "pods bound between a filter and the next")
    g.add_argument(
        "--binding-wait",
        type=float,
        default=DEFAULT_BINDING_WAIT_S,
        metavar="SECONDS",
        help="with --kubernetes: a filter waits at most this long for the bindings of pods filter answered "
        "before it (kube-scheduler starts the next pod's cycle before it binds the last one), so GPUs "
        "just taken are never offered again. Bindings reach the extender through its bind verb (bindVerb: "
        f"bind, milliseconds) or the pod watch. 0: never wait; at most {MAX_BINDING_WAIT_S:g}, under the "
        "scheduler's httpTimeout",
    )
    g.add_argument(
        "--peers",
        default="",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="with --kubernetes: the other replicas' scheduler API, told of every binding this replica's "
        "filters open so that their filters wait for it too when kube-scheduler's calls move between "
        "replicas (docs/architecture.md, Bursts). Each HOST is resolved every 15 s to all its addresses "
        "(the headless Service of the replicas: gpu-extender-agents.gpu-extender.svc:8888); this replica "
        "finds itself among them and skips itself. Over HTTPS (--tls-cert) the peers' certificates are "
        "checked against --peers-ca, for the name HOST. Default: none",
    )
    g.add_argument(
        "--peers-ca",
        type=Path,
        default=None,
        metavar="FILE",
        help="CA bundle the peers' serving certificates are checked against (default: --tls-ca, the CA of "
        "deploy/'s certificates)",
    )
    g = p.add_argument_group(
        "multi-pod groups",
        "LeaderWorkerSet groups, Workload/coscheduling/Volcano PodGroups: placed whole in one domain",
    )
    g.add_argument(
        "--group-topology-levels",
        default=DEFAULT_GROUP_LEVEL,
        metavar="LABEL[,LABEL...]",
        help="node labels that name a group's domain (an NVLink clique, a network block, a rack), tried "
        "in order: a group's members all go to one domain of the first level where one holds them all. "
        "A level no candidate node carries is skipped; with none carried, a group is placed whole "
        "anywhere. A group that names its own key (PodGroup topology constraint, LWS exclusive-topology) "
        "uses the levels up to it when it is one of them, else that key alone. A group larger than any "
        "domain of the first level is split evenly over the fewest of them inside one domain of the next. "
        f"Default: {DEFAULT_GROUP_LEVEL}",
    )
    g.add_argument(
        "--group-topology-policy",
        choices=("required", "preferred"),
        default="required",
        help="required: a group that no domain of the levels holds waits whole (GroupDoesNotFit in "
        "explain); preferred: it is then placed whole across domains, on free idle healthy GPUs. A "
        "group that names its own key (PodGroup topology constraint, LWS or JobSet exclusive-topology) "
        "is always required. Default: required",
    )
    g.add_argument(
        "--group-hold",
        type=float,
        default=DEFAULT_GROUP_HOLD_S,
        metavar="SECONDS",
        help="how long the GPUs chosen for a group's members not yet bound stay held for them without "
        "a member binding; then the hold is released (explain says why) and the group plans again "
        f"at its next member. Within (0, {MAX_GROUP_HOLD_S:g}]",
    )
    g.add_argument(
        "--group-members-grace",
        type=float,
        default=DEFAULT_GROUP_MEMBERS_GRACE_S,
        metavar="SECONDS",
        help="with --kubernetes: a group's room is held only for members that exist as pods: this long "
        "after its hold began, a group with fewer member pods than its size is released (explain says "
        "why) until another member comes or one binds. LeaderWorkerSet, JobSet and the PodGroup "
        f"controllers create every member at once. Within (0, {MAX_GROUP_MEMBERS_GRACE_S:g}]",
    )
    g.add_argument(
        "--group-holds-per-namespace",
        type=int,
        default=DEFAULT_GROUPS_PER_NAMESPACE,
        metavar="N",
        help="the most groups one namespace may have held at once: a namespace's next group waits "
        "(GroupNamespaceFull in explain) until one of its groups is placed whole or released, so no "
        "namespace holds the fleet by naming groups whose members never come; other namespaces' "
        f"groups are placed as before. Within [1, {MAX_GROUPS}] (the most groups held in all)",
    )
    g = p.add_argument_group("DRA device taints", "GPU health written as DRA DeviceTaintRules (with --kubernetes)")
    g.add_argument(
        "--device-taints",
        choices=("on", "off"),
        default="on",
        help="with --kubernetes: keep a DRA DeviceTaintRule on each GPU device its agent reports unhealthy "
        "(NoSchedule) or degraded (None), so DRA's allocator does not hand it out; one replica writes "
        "(Lease leader election). Needs the API to serve DeviceTaintRules and the RBAC in "
        "deploy/components/device-taints; without them the extender says so once and filters only",
    )
    g.add_argument(
        "--device-taint-after",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="a GPU is unhealthy or degraded this long before its device is tainted (never on one bad "
        f"sample). Within [0, {MAX_HOLD_S:g}]",
    )
    g.add_argument(
        "--device-taint-clear-after",
        type=float,
        default=DEFAULT_HEALTH_CLEAR_S,
        metavar="SECONDS",
        help="a GPU is healthy again this long, without a break, before its health rule (and its "
        "device-plugin node's unusable mark) goes: a GPU whose health flaps is written once a hold at "
        f"most, and not offered between two faults. 0: at once. Within [0, {MAX_HOLD_S:g}]",
    )
    g.add_argument(
        "--leader-namespace",
        default=None,
        metavar="NAMESPACE",
        help="namespace of the device-taint writer's Lease (default: $POD_NAMESPACE, else gpu-extender)",
    )
    g = p.add_argument_group(
        "what other schedulers and autoscalers see",
        "busy GPUs and device-plugin nodes' usable GPUs, written to the API (with --kubernetes and "
        "--device-taints on; deploy/README.md, 'What other schedulers and autoscalers see')",
    )
    g.add_argument(
        "--busy-taints",
        choices=("on", "off"),
        default="on",
        help="keep a DeviceTaintRule (gpu-extender.io/busy-outside-kubernetes:NoSchedule) on each DRA GPU "
        "its agent sees busy while no claim (nor, where the agent reads the kubelet, no pod) holds it, "
        "for longer than --busy-hold; and count such GPUs unusable on device-plugin nodes",
    )
    g.add_argument(
        "--busy-hold",
        type=float,
        default=DEFAULT_BUSY_HOLD_S,
        metavar="SECONDS",
        help="a GPU is busy outside Kubernetes this long, without a break, before it is tainted, and idle "
        "or held by a pod this long before the taint goes: a job pausing between kernels, or a pod's "
        f"process still exiting, changes nothing. Within [{MIN_BUSY_HOLD_S:g}, {MAX_HOLD_S:g}]",
    )
    g.add_argument(
        "--node-conditions",
        choices=("on", "off"),
        default="on",
        help="keep a GPUsUsable condition on each device-plugin GPU node (True: a GPU is usable; False: "
        "every GPU is unhealthy or busy outside Kubernetes; Unknown: no agent data), counts in its message",
    )
    g.add_argument(
        "--node-taint",
        choices=("on", "off"),
        default="off",
        help="taint a device-plugin GPU node none of whose GPUs is usable (every pod without a toleration "
        "avoids it, GPU or not: hence off by default), and remove the taint once one is. Needs "
        "deploy/components/node-taints. Off: a taint of --node-taint-key written earlier is removed",
    )
    g.add_argument(
        "--node-taint-key",
        default=DEFAULT_NODE_TAINT_KEY,
        metavar="KEY",
        help="the node taint's key (no other taint is ever touched)",
    )
    g.add_argument(
        "--node-taint-effect",
        choices=("NoSchedule", "PreferNoSchedule"),
        default="NoSchedule",
        help="the node taint's effect (never NoExecute: nothing is evicted)",
    )
    g.add_argument(
        "--idle-window",
        type=float,
        default=DEFAULT_IDLE_WINDOW_S,
        metavar="SECONDS",
        help="GPUs a pod or a ResourceClaim holds that stay idle this long without a break are a reclaim "
        "and scale-down signal: counted in gpu_extender_node_gpus_idle_past_window and "
        "gpu_extender_claim_gpus_idle_past_window, and announced once per window as an Event "
        "(AllocatedGPUsIdle) on the Node or the ResourceClaim. Nothing is evicted. "
        f"Within [{MIN_IDLE_WINDOW_S:g}, {MAX_IDLE_WINDOW_S:g}]",
    )
    g.add_argument(
        "--idle-events",
        choices=("on", "off"),
        default="on",
        help="write the AllocatedGPUsIdle Events (the metrics stay)",
    )
    g.add_argument(
        "--reclaim",
        choices=RECLAIM_MODES,
        default="off",
        help="evict pods whose GPUs read idle for --idle-window where GPU pods kube-scheduler marked "
        "Unschedulable need those GPUs on that node: only pods of namespaces labelled "
        f"{RECLAIM_LABEL[0]}={RECLAIM_LABEL[1]}, Running for --reclaim-min-runtime, of no higher priority "
        "than the pod they serve, through the Eviction API (PodDisruptionBudgets honoured), by the leader, "
        "a few a pass within --publish-writes-per-second; an Event on each pod says why. dry-run: the "
        "Events and gpu_extender_reclaim_evictions_total say what would be evicted, nothing is. Needs "
        "--kubernetes, --device-taints on and deploy/components/reclaim (deploy/README.md, 'Reclaim')",
    )
    g.add_argument(
        "--reclaim-min-runtime",
        type=float,
        default=DEFAULT_RECLAIM_MIN_RUNTIME_S,
        metavar="SECONDS",
        help="reclaim never evicts a pod that has run (status.startTime) for less than this. "
        f"Within [{MIN_RECLAIM_MIN_RUNTIME_S:g}, {MAX_RECLAIM_MIN_RUNTIME_S:g}]",
    )
    g.add_argument(
        "--cleanup-on-exit",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="on SIGTERM, the replica that holds the device-taint Lease removes what the extender wrote "
        "(its DeviceTaintRules, every Node's GPUsUsable condition and the --node-taint-key taint) before "
        f"it gives the Lease up, within {CLEANUP_ON_EXIT_TIMEOUT_S:g} s, and logs what it removed; the other "
        "replicas remove nothing. "
        "Off by default: a rolling update would clear and rewrite every rule and condition. To uninstall, "
        "`gpu-extender cleanup` does the same from an admin's machine",
    )
    g.add_argument(
        "--publish-writes-per-second",
        type=float,
        default=DEFAULT_WRITES_PER_S,
        metavar="N",
        help="at most this many API writes per second for the taint rules, node taints and conditions "
        f"together (bursts of as many; the rest waits for the next pass). Within (0, {MAX_WRITES_PER_S:g}]",
    )
    g = p.add_argument_group("fleet page and logs")
    g.add_argument(
        "--fleet-page",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the read-only fleet page on --http-addr (GET /ui, its JSON and its 'where would this "
        "pod go?' form): GPU nodes, their GPUs' state, utilization and memory, AcceleratorClasses, node "
        "names; no login, nothing secret. --no-fleet-page: those paths answer 404",
    )
    g.add_argument("--log-level", default="info", choices=LEVELS)
    g.add_argument(
        "--log-format",
        default="text",
        choices=FORMATS,
        help="text: one line per event; json: one JSON object per line with the structured fields "
        "(node, pod, verb, reason) as keys",
    )
    return p


MAX_PEERS = 16  # --peers entries: a Service or a few replicas


def _peers(args: argparse.Namespace) -> tuple[HostPort, ...]:
    """--peers read: HOST:PORT entries, each with both parts; checked against what it needs."""
    entries = [e.strip() for e in args.peers.split(",") if e.strip()]
    if not entries:
        return ()
    if len(entries) > MAX_PEERS:
        raise ConfigError(f"--peers: {len(entries)} entries; at most {MAX_PEERS} (a Service name resolves to all)")
    if not args.kubernetes:
        raise ConfigError("--peers needs --kubernetes: a peer's open bindings are closed by the pod watch")
    if args.binding_wait <= 0:
        raise ConfigError("--peers needs --binding-wait above 0: nothing waits for an open binding without it")
    if args.tls_cert is not None and args.peers_ca is None and args.tls_ca is None:
        raise ConfigError(
            "--peers over HTTPS (--tls-cert) needs --peers-ca or --tls-ca to check the peers' certificates"
        )
    if args.peers_ca is not None and not args.peers_ca.is_file():
        raise ConfigError(f"--peers-ca {args.peers_ca}: no such file")
    peers = []
    for entry in entries:
        try:
            peer = parse_host_port(entry, default_host="")
        except AddressError as exc:
            raise ConfigError(f"--peers {exc}") from None
        if not peer.host or peer.port == 0:
            raise ConfigError(f"--peers {entry!r}: expected HOST:PORT, e.g. gpu-extender-agents.gpu-extender.svc:8888")
        peers.append(peer)
    return tuple(peers)


def _tls(args: argparse.Namespace) -> ServingTlsFiles | None:
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together: pass both or neither")
    if args.tls_ca is not None and args.tls_cert is None:
        raise ConfigError("--tls-ca (client certificates for agents) needs --tls-cert and --tls-key")
    try:
        for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--tls-ca", args.tls_ca)):
            check_readable(flag, path)
    except CredentialFileError as exc:
        raise ConfigError(str(exc)) from None
    return ServingTlsFiles(args.tls_cert, args.tls_key, args.tls_ca) if args.tls_cert else None


def _agent_auth(args: argparse.Namespace) -> AgentAuth:
    audience = args.agent_token_audience.strip()
    if not audience:
        raise ConfigError("--agent-token-audience must not be empty")
    if args.agent_reauth_interval < 1:
        raise ConfigError("--agent-reauth-interval must be at least 1 second")
    if args.agent_auth == "none":
        for flag, value in (
            ("--agent-service-account", args.agent_service_account),
            ("--relay-service-account", args.relay_service_account),
        ):
            if value is not None:
                raise ConfigError(f"{flag} only applies with --agent-auth tokenreview")
        return AgentAuth("none", None, audience)
    if not args.kubernetes:
        raise ConfigError(
            "--agent-auth tokenreview calls the API server's TokenReview: it needs --kubernetes "
            "(in-cluster credentials or --kubeconfig)"
        )
    if not args.agent_service_account:
        raise ConfigError("--agent-auth tokenreview needs --agent-service-account NAMESPACE/NAME")
    accounts: list[ServiceAccountRef | None] = []
    for flag, value in (
        ("--agent-service-account", args.agent_service_account),
        ("--relay-service-account", args.relay_service_account),
    ):
        try:
            accounts.append(parse_service_account(value) if value else None)
        except ValueError as exc:
            raise ConfigError(f"{flag} {exc}") from None
    agents, relays = accounts
    if relays is not None and relays == agents:
        raise ConfigError(
            "--relay-service-account must differ from --agent-service-account: a relay speaks for "
            "every node, an agent only for its own"
        )
    return AgentAuth("tokenreview", agents, audience, args.agent_reauth_interval, relays)


def build_config(argv: Sequence[str] | None, env: Mapping[str, str] | None = None) -> ExtenderConfig:
    """Flags over GPU_EXTENDER_* variables over --config's file over defaults (common/layered_config.py)."""
    try:
        layered = parse_layered(
            build_parser, sys.argv[1:] if argv is None else argv, os.environ if env is None else env, ENV_PREFIX
        )
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
    args = layered.args
    try:
        http_addr = parse_host_port(args.http_addr)
        grpc_addr = parse_host_port(args.grpc_addr)
    except AddressError as exc:
        raise ConfigError(str(exc)) from None
    for flag, value in (
        ("--idle-max-utilization", args.idle_max_utilization),
        ("--idle-max-memory", args.idle_max_memory),
    ):
        if not 0 < value <= 100:
            raise ConfigError(f"{flag} {value} must be within (0, 100]")
    max_sm_active = _percent_or_off(args.idle_max_sm_active)
    if args.readiness_grace < 0:
        raise ConfigError("--readiness-grace must be >= 0")
    if args.stale_after <= 0:
        raise ConfigError("--stale-after must be positive")
    if args.max_body_bytes < 64 * 1024:
        raise ConfigError("--max-body-bytes below 64 KiB cannot hold one scheduler request")
    if args.shortlist < 0:
        raise ConfigError(f"--shortlist {args.shortlist} must be >= 0 (0: answer every node that passes)")
    if args.max_candidates < 1:
        raise ConfigError(f"--max-candidates {args.max_candidates} must be at least 1")
    if not (math.isfinite(args.body_read_timeout) and args.body_read_timeout > 0):
        raise ConfigError(f"--body-read-timeout {args.body_read_timeout:g} must be a positive number of seconds")
    if args.requested_agent_interval < 0 or args.forget_after <= args.stale_after:
        raise ConfigError("need --requested-agent-interval >= 0 and --forget-after > --stale-after")
    if args.inventory is not None and not args.inventory.exists():
        raise ConfigError(f"--inventory {args.inventory}: no such file or directory")
    if args.inventory is not None and args.kubernetes:
        raise ConfigError("--inventory and --kubernetes are two inventory sources: pick one")
    if args.kubeconfig is not None and not args.kubernetes:
        raise ConfigError("--kubeconfig only applies with --kubernetes")
    if not 1 <= args.max_clock_skew <= 86_400:  # also refuses NaN and inf
        raise ConfigError(f"--max-clock-skew {args.max_clock_skew:g} must be within [1, 86400] seconds")
    if not 0 <= args.binding_wait <= MAX_BINDING_WAIT_S:  # also refuses NaN
        raise ConfigError(f"--binding-wait {args.binding_wait:g} must be within [0, {MAX_BINDING_WAIT_S:g}] seconds")
    if not 0 < args.group_members_grace <= MAX_GROUP_MEMBERS_GRACE_S:  # also refuses NaN
        raise ConfigError(
            f"--group-members-grace {args.group_members_grace:g} must be within (0, {MAX_GROUP_MEMBERS_GRACE_S:g}] "
            "seconds"
        )
    if not 0 < args.group_hold <= MAX_GROUP_HOLD_S:  # also refuses NaN
        raise ConfigError(f"--group-hold {args.group_hold:g} must be within (0, {MAX_GROUP_HOLD_S:g}] seconds")
    if not 1 <= args.group_holds_per_namespace <= MAX_GROUPS:
        raise ConfigError(
            f"--group-holds-per-namespace {args.group_holds_per_namespace} must be within [1, {MAX_GROUPS}]"
        )
    peers = _peers(args)
    levels = group_levels(args.group_topology_levels)
    if not 0 <= args.device_taint_after <= MAX_HOLD_S:  # also refuses NaN
        raise ConfigError(
            f"--device-taint-after {args.device_taint_after:g} must be within [0, {MAX_HOLD_S:g}] seconds"
        )
    if not 0 <= args.device_taint_clear_after <= MAX_HOLD_S:  # also refuses NaN
        raise ConfigError(
            f"--device-taint-clear-after {args.device_taint_clear_after:g} must be within [0, {MAX_HOLD_S:g}] seconds"
        )
    if not MIN_BUSY_HOLD_S <= args.busy_hold <= MAX_HOLD_S:
        raise ConfigError(
            f"--busy-hold {args.busy_hold:g} must be within [{MIN_BUSY_HOLD_S:g}, {MAX_HOLD_S:g}] seconds"
        )
    if not 0 < args.publish_writes_per_second <= MAX_WRITES_PER_S:
        raise ConfigError(
            f"--publish-writes-per-second {args.publish_writes_per_second:g} must be within (0, {MAX_WRITES_PER_S:g}]"
        )
    if not MIN_IDLE_WINDOW_S <= args.idle_window <= MAX_IDLE_WINDOW_S:
        raise ConfigError(
            f"--idle-window {args.idle_window:g} must be within [{MIN_IDLE_WINDOW_S:g}, {MAX_IDLE_WINDOW_S:g}] seconds"
        )
    if not MIN_RECLAIM_MIN_RUNTIME_S <= args.reclaim_min_runtime <= MAX_RECLAIM_MIN_RUNTIME_S:
        raise ConfigError(
            f"--reclaim-min-runtime {args.reclaim_min_runtime:g} must be within "
            f"[{MIN_RECLAIM_MIN_RUNTIME_S:g}, {MAX_RECLAIM_MIN_RUNTIME_S:g}] seconds"
        )
    if args.reclaim != "off" and (not args.kubernetes or args.device_taints == "off"):
        raise ConfigError(
            f"--reclaim {args.reclaim} needs --kubernetes and --device-taints on (the leader of the device-taint "
            "Lease evicts, within its write budget)"
        )
    if not is_taint_key(args.node_taint_key):
        raise ConfigError(f"--node-taint-key {args.node_taint_key!r} is not a taint key ({TAINT_KEY_FORM})")
    if args.cleanup_on_exit and (not args.kubernetes or args.device_taints == "off"):
        raise ConfigError(
            "--cleanup-on-exit needs --kubernetes and --device-taints on (the leader of the device-taint Lease "
            "removes the writes); after the extender is gone, `gpu-extender cleanup` removes them"
        )
    if args.max_unknown_nodes < 0:
        raise ConfigError(f"--max-unknown-nodes {args.max_unknown_nodes} must be >= 0 (0: inventory nodes only)")
    ingest_workers = _ingest_workers(args.ingest_workers)
    if args.ingest_in_process and args.ingest_workers.strip() != "auto":
        raise ConfigError("--ingest-workers and --ingest-in-process contradict: one process has no workers (pick one)")
    resources = tuple(dict.fromkeys(r.strip() for r in args.gpu_resource if r.strip())) or ("nvidia.com/gpu",)
    prefix = args.path_prefix.strip()
    if prefix and not prefix.startswith("/"):
        prefix = "/" + prefix
    return ExtenderConfig(
        http_addr=http_addr,
        grpc_addr=grpc_addr,
        inventory=args.inventory,
        kubernetes=args.kubernetes,
        kubeconfig=args.kubeconfig,
        idle_rule=IdleRule(args.idle_max_utilization, args.idle_max_memory, max_sm_active),
        api=ApiSettings(
            policy=DecisionPolicy(args.stale_after, args.stale_policy, args.no_fit_policy),
            gpu_resources=resources,
            compact_priorities=args.prioritize_answer == "compact",
            shortlist=args.shortlist,
            max_body_bytes=args.max_body_bytes,
            max_candidates=args.max_candidates,
            body_read_timeout_s=args.body_read_timeout,
            path_prefix=prefix,
            default_class_policy=args.default_class_policy,
            runtime_check=args.runtime_check,
            node_strategy=args.node_strategy,
            random_seed=args.random_seed,
            readiness_grace_s=args.readiness_grace,
            fleet_page=args.fleet_page,
            binding_wait_s=args.binding_wait if args.kubernetes else 0.0,
            group_levels=levels,
            group_preferred=args.group_topology_policy == "preferred",
            group_hold_s=args.group_hold,
            group_members_grace_s=args.group_members_grace,
            groups_per_namespace=args.group_holds_per_namespace,
        ),
        requested_agent_interval_ms=int(args.requested_agent_interval * 1000),
        forget_after_s=args.forget_after,
        log_level=args.log_level,
        tls=_tls(args),
        agent_auth=_agent_auth(args),
        max_clock_skew_s=args.max_clock_skew,
        max_unknown_nodes=args.max_unknown_nodes,
        ingest_in_process=args.ingest_in_process,
        ingest_workers=ingest_workers,
        log_format=args.log_format,
        device_taints=args.device_taints if args.kubernetes else "off",
        device_taint_after_s=args.device_taint_after,
        device_taint_clear_after_s=args.device_taint_clear_after,
        peers=peers,
        peers_ca=(args.peers_ca or args.tls_ca) if peers and args.tls_cert is not None else None,
        publish=PublishSettings(
            busy_taints=args.busy_taints == "on",
            busy_hold_s=args.busy_hold,
            node_conditions=args.node_conditions == "on",
            node_taint=args.node_taint == "on",
            node_taint_key=args.node_taint_key,
            node_taint_effect=args.node_taint_effect,
            writes_per_s=args.publish_writes_per_second,
            idle_window_s=args.idle_window,
            idle_events=args.idle_events == "on",
            reclaim=args.reclaim,
            reclaim_min_runtime_s=args.reclaim_min_runtime,
            cleanup_on_exit=args.cleanup_on_exit,
        ),
        leader_namespace=args.leader_namespace
        or (os.environ if env is None else env).get("POD_NAMESPACE")
        or "gpu-extender",
        sources=tuple((d, src) for d, src in layered.sources.items() if src != "flag"),
    )


def _percent_or_off(text: str) -> float | None:
    """--idle-max-sm-active: a percent within (0, 100], or off (None)."""
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--idle-max-sm-active {text!r} is not a percent or off") from None
    if not 0 < value <= 100:  # also refuses NaN
        raise ConfigError(f"--idle-max-sm-active {value:g} must be within (0, 100] or off")
    return value


def _ingest_workers(text: str) -> int:
    if text.strip() == "auto":
        return auto_ingest_workers(usable_cpus())
    try:
        count = int(text)
    except ValueError:
        raise ConfigError(f"--ingest-workers {text!r}: a number of processes, or auto") from None
    if not 1 <= count <= MAX_INGEST_WORKERS:
        raise ConfigError(f"--ingest-workers {count} must be within [1, {MAX_INGEST_WORKERS}] (or auto)")
    return count


def group_levels(text: str) -> tuple[str, ...]:
    """--group-topology-levels: label keys, comma-separated, each a valid label key."""
    levels = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not levels:
        raise ConfigError("--group-topology-levels names no label (default: " + DEFAULT_GROUP_LEVEL + ")")
    for level in levels:
        problem = topology_problem(level)
        if problem:
            raise ConfigError(f"--group-topology-levels: {problem}")
    return levels
