"""Which multi-pod group a pod belongs to, read from what clusters already write on their pods.

Sources, in this order (the first a pod names wins; `../reference` facts in docs/architecture.md,
"Multi-pod jobs"):
- Workload API (kube-scheduler 1.36, `scheduling.k8s.io/v1alpha2`): `spec.schedulingGroup.podGroupName`;
  size and domain key from the PodGroup (`spec.schedulingPolicy.gang.minCount`,
  `spec.schedulingConstraints.topology[].key`), read by state/pod_groups.py.
- LeaderWorkerSet: label `leaderworkerset.sigs.k8s.io/group-key`; size from the pod annotation
  `leaderworkerset.sigs.k8s.io/size`; domain key from `leaderworkerset.sigs.k8s.io/exclusive-topology`.
- coscheduling (scheduler-plugins): label `scheduling.x-k8s.io/pod-group`; size from its PodGroup's
  `spec.minMember`.
- Volcano: annotation `scheduling.k8s.io/group-name`; size from its PodGroup's `spec.minMember`.
- JobSet, where it asks for one domain per job (annotation `alpha.jobset.sigs.k8s.io/exclusive-topology`,
  which JobSet copies to the pods): the group is one Job (label `batch.kubernetes.io/job-name`, with
  `jobset.sigs.k8s.io/jobset-name`), its size the Job's `spec.parallelism`, its domain that key.

Everything here is written by users: a group never spans namespaces (the key holds the pod's
own), names and keys are bounded, and a size that is not a whole number in [2, MAX_GROUP_SIZE]
makes the pod a single pod, with the reason kept for explain. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any

from gpuextender.extender.model.untrusted import object_at, shown

WORKLOAD = "workload"
LWS = "leaderworkerset"
COSCHEDULING = "coscheduling"
VOLCANO = "volcano"
JOBSET = "jobset"
SOURCES = (WORKLOAD, LWS, COSCHEDULING, VOLCANO, JOBSET)
# Sources whose scheduler holds every member at Permit until the group's minimum is placed (kube-
# scheduler 1.36's gang scheduling; scheduler-plugins' coscheduling): a member it has placed stays
# unbound while the others are placed, so the extender counts the members it passed as placed.
GANG_SOURCES = frozenset({WORKLOAD, COSCHEDULING})
# Sources whose size (and domain key) live in an object (a PodGroup, JobSet's Job), not on the pod.
SIZED_BY_OBJECT = frozenset({WORKLOAD, COSCHEDULING, VOLCANO, JOBSET})

LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")  # the second: before Kubernetes 1.27

MAX_GROUP_SIZE = 512  # members; 64 nodes of 8 GPUs is the largest NVL72-class job seen, with room
MAX_NAME_CHARS = 253  # a Kubernetes object name (LWS's group key is a 40-character hash)
MAX_LABEL_KEY_CHARS = 317  # a label key: a 253-character DNS prefix, "/", a 63-character name


@dataclass(frozen=True, slots=True)
class GroupRef:
    key: str  # "<namespace>/<source>/<name>": a group never spans namespaces
    source: str  # one of SOURCES
    namespace: str
    name: str
    size: int | None  # members; None: its PodGroup says (SIZED_BY_OBJECT)
    topology_key: str = ""  # the label the group names for its domain ("": the configured levels)


@dataclass(frozen=True, slots=True)
class GroupReading:
    """A pod's group, or why it is decided as a single pod although it names one."""

    ref: GroupRef | None
    problem: str = ""  # set when the pod names a group that cannot be used


NO_GROUP = GroupReading(None)


def read_group(pod: Any) -> GroupReading:
    meta = object_at(pod, "metadata")
    labels = object_at(meta, "labels")
    annotations = object_at(meta, "annotations")
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str) or len(namespace) > MAX_NAME_CHARS:
        return NO_GROUP  # the API server never sends such a pod; nothing to key a group on
    workload = object_at(object_at(pod, "spec"), "schedulingGroup").get("podGroupName")
    if workload is not None:
        return _named(WORKLOAD, namespace, workload, None, "")
    lws = labels.get(LWS_GROUP_KEY)
    if lws is not None:
        size, problem = _size(annotations.get(LWS_SIZE), f"annotation {LWS_SIZE}")
        if problem:
            return GroupReading(None, f"{LWS} group {shown(lws)}: {problem}: decided as a single pod")
        return _named(LWS, namespace, lws, size, annotations.get(LWS_EXCLUSIVE_TOPOLOGY, ""))
    coscheduling = labels.get(COSCHEDULING_LABEL)
    if coscheduling is not None:
        return _named(COSCHEDULING, namespace, coscheduling, None, "")
    volcano = annotations.get(VOLCANO_ANNOTATION)
    if volcano is not None:
        return _named(VOLCANO, namespace, volcano, None, "")
    exclusive = annotations.get(JOBSET_EXCLUSIVE_TOPOLOGY)
    if exclusive is not None and labels.get(JOBSET_NAME) is not None:
        job = next((j for label in JOB_NAME_LABELS if (j := labels.get(label)) is not None), None)
        return _named(JOBSET, namespace, job, None, exclusive)
    return NO_GROUP


def _named(source: str, namespace: str, name: Any, size: int | None, topology_key: Any) -> GroupReading:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        return GroupReading(
            None, f"{source} group name {shown(name)} is not a name of 1-{MAX_NAME_CHARS} characters: single pod"
        )
    problem = topology_problem(topology_key)
    if problem:
        return GroupReading(None, f"{source} group {shown(name)}: {problem}: decided as a single pod")
    if size == 1:  # a group of one is a single pod
        return NO_GROUP
    return GroupReading(GroupRef(group_key(source, namespace, name), source, namespace, name, size, topology_key))


def group_key(source: str, namespace: str, name: str) -> str:
    """A group's key: its namespace, source and name (a group never spans namespaces)."""
    return f"{namespace}/{source}/{name}"


def namespace_of(key: str) -> str:
    """The namespace of a `group_key` (a namespace's name has no "/")."""
    return key.partition("/")[0]


def topology_problem(key: Any) -> str:
    """Why `key` cannot name a node label ("" when it can, or is "": none named)."""
    if isinstance(key, str) and len(key) <= MAX_LABEL_KEY_CHARS and " " not in key:
        return ""
    return f"topology key {shown(key)} is not a label key of at most {MAX_LABEL_KEY_CHARS} characters"


def _size(value: Any, where: str) -> tuple[int | None, str]:
    """A member count from an annotation's text: (size, "") or (None, why not)."""
    text = value.strip() if isinstance(value, str) else None
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 6:
        return None, f"{where} = {shown(value)} is not a whole number"
    return size_problem(int(text), where)


def size_problem(size: int, where: str) -> tuple[int | None, str]:
    """(size, "") for 1..MAX_GROUP_SIZE members, else (None, why not)."""
    if 1 <= size <= MAX_GROUP_SIZE:
        return size, ""
    return None, f"{where} = {size} is outside 1..{MAX_GROUP_SIZE}"


@dataclass(frozen=True, slots=True)
class PodGroupSpec:
    """What a PodGroup object says of its group: the member count that makes it whole, and the
    label its members must share; or why it cannot be used (`problem`)."""

    size: int | None
    topology_key: str = ""
    problem: str = ""


def read_pod_group(source: str, obj: Any) -> PodGroupSpec:
    """A PodGroup of `source` (WORKLOAD: scheduling.k8s.io/v1alpha2; COSCHEDULING:
    scheduling.x-k8s.io/v1alpha1; VOLCANO: scheduling.volcano.sh/v1beta1), or JOBSET's Job (batch/v1)."""
    spec = object_at(obj, "spec")
    topology = ""
    if source == JOBSET:
        minimum, where = spec.get("parallelism", 1), "spec.parallelism"  # the API's default is 1
    elif source == WORKLOAD:
        minimum = object_at(object_at(spec, "schedulingPolicy"), "gang").get("minCount")
        where = "spec.schedulingPolicy.gang.minCount"
        levels = object_at(spec, "schedulingConstraints").get("topology")
        if isinstance(levels, list) and levels and isinstance(levels[0], dict):
            topology = levels[0].get("key", "")
            problem = topology_problem(topology)
            if problem:
                return PodGroupSpec(None, "", problem)
        if minimum is None:
            return PodGroupSpec(None, topology, "no gang policy (spec.schedulingPolicy.gang.minCount)")
    else:
        minimum, where = spec.get("minMember"), "spec.minMember"
    if isinstance(minimum, bool) or not isinstance(minimum, int):
        return PodGroupSpec(None, topology, f"{where} = {shown(minimum)} is not a whole number")
    size, problem = size_problem(minimum, where)
    return PodGroupSpec(size, topology, problem)


MAX_PINNING_READ = 64  # nodeSelector entries, node affinity terms and expressions each read at most
HOSTNAME = "kubernetes.io/hostname"


def pinned_keys(pod: Any) -> frozenset[str]:
    """The node label keys the pod's own spec pins to one value: its `nodeSelector`, and the keys of
    its required node affinity whose every term says `In` with one value (what Kueue's
    topology-aware scheduling writes to put a group in a domain it chose). Read leniently and
    bounded: anything else pins nothing."""
    spec = object_at(pod, "spec")
    selector = spec.get("nodeSelector")
    keys = set(islice(selector, MAX_PINNING_READ)) if isinstance(selector, dict) else set()
    required = object_at(
        object_at(object_at(spec, "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = required.get("nodeSelectorTerms")
    if isinstance(terms, list) and 0 < len(terms) <= MAX_PINNING_READ:
        per_term = [_one_value_keys(term) for term in terms]
        keys |= set.intersection(*per_term)
    return frozenset(k for k in keys if isinstance(k, str))


def _one_value_keys(term: Any) -> set[str]:
    expressions = term.get("matchExpressions") if isinstance(term, dict) else None
    if not isinstance(expressions, list):
        return set()
    return {
        e["key"]
        for e in expressions[:MAX_PINNING_READ]
        if isinstance(e, dict)
        and isinstance(e.get("key"), str)
        and e.get("operator") == "In"
        and isinstance(e.get("values"), list)
        and len(e["values"]) == 1
    }


# RoleBasedGroup (sgl-project/rbg): every role's pods carry the group's name and their role's.
RBG_NAME = "rolebasedgroup.workloads.x-k8s.io/name"
RBG_ROLE = "rolebasedgroup.workloads.x-k8s.io/role"


def rbg_role(pod: Any) -> tuple[str, str]:
    """("namespace/rbg/<name>", role) for a pod of a RoleBasedGroup's role, else ("", "")."""
    meta = object_at(pod, "metadata")
    labels = object_at(meta, "labels")
    name, role, namespace = labels.get(RBG_NAME), labels.get(RBG_ROLE), meta.get("namespace") or "default"
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_NAME_CHARS for v in (name, role, namespace)):
        return "", ""
    return f"{namespace}/rbg/{name}", str(role)
