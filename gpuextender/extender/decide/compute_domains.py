"""NVIDIA ComputeDomains (multi-node NVLink through IMEX; model/dra.COMPUTE_DOMAIN_DRIVER): a node
runs the IMEX daemon of one ComputeDomain at a time, so a pod whose claims name a ComputeDomain
cannot start on a node where another one's channel or daemon is allocated. kube-scheduler does not
see it (the devices are other devices): the pod would be bound there and wait in
ContainerCreating until the other domain leaves (NVIDIA/k8s-dra-driver-gpu #353). Such a node
fails, unresolvably (evicting GPU pods frees nothing of it); nodes that hold the pod's own domain
or none are judged as before. A group's domains count only the nodes left.

And two ComputeDomains in one NVLink clique run two IMEX daemon ensembles there, and both
workloads' fabric memory calls then fail now and then (CUDA_ERROR_NOT_SUPPORTED; NVIDIA/
k8s-dra-driver-gpu #892; the driver does not prevent it): a group of a ComputeDomain takes a clique
no other ComputeDomain uses where one holds it (`shared_by_another`), and a shared one only where
none does (explain says so)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from gpuextender.extender.decide.reasons import Reason

OTHER_COMPUTE_DOMAIN = Reason(
    "OtherComputeDomain",
    "the node runs another ComputeDomain's IMEX channel or daemon: one ComputeDomain per node",
    unresolvable=True,
)
# explain's note on a ComputeDomain's group whose domain another ComputeDomain uses (#892).
SHARED_CLIQUE_NOTE = (
    "the domain holds another ComputeDomain's pods: no domain free of other ComputeDomains holds the group "
    "(two ComputeDomains in one NVLink clique may fail each other's fabric memory calls: "
    "NVIDIA/k8s-dra-driver-gpu #892)"
)


def vetoed(
    domains: frozenset[str], names: Iterable[str], domains_on: Callable[[str], frozenset[str]]
) -> dict[str, Reason]:
    """The nodes of `names` that hold a ComputeDomain other than the pod's `domains`, each with why."""
    return {node: OTHER_COMPUTE_DOMAIN for node in names if not domains_on(node) <= domains}


def shared_by_another(
    domains: frozenset[str], nodes: Collection[str], domains_on: Callable[[str], frozenset[str]]
) -> bool:
    """Whether any of `nodes` (one clique's, passing or not) holds a ComputeDomain other than `domains`."""
    return any(not domains_on(node) <= domains for node in nodes)
