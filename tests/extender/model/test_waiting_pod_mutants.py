"""Rules of model/waiting_pod.py that mutation testing (mutmut) found no test holding, each test
failing on a one-line change: a toleration's effect, key, operator and value each decide as
Kubernetes decides, and one is read with Kubernetes' defaults (operator Equal, no value, every
effect); a pod is waiting only with its metadata, spec and status objects, its uid and its name, and
from one whole GPU; a mistyped nodeSelector makes it unreadable; it is keyed in `default` without a
namespace and created at 0.0 without a readable time; and a required-affinity term with
`matchFields` matches no node even with expressions, while the terms after an unusable one are
still read."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.model.waiting_pod import Toleration, WaitingPod, read_waiting

GPU = ("nvidia.com/gpu",)
TAINT = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}


def pod(gpus: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "team", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}], **spec},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def waiting(p: dict[str, Any]) -> WaitingPod:
    w = read_waiting(p, GPU)
    assert w is not None
    return w


def test_a_toleration_of_one_effect_tolerates_that_effect_only() -> None:
    assert Toleration("gpu", "Equal", "yes", "NoSchedule").tolerates(TAINT)
    assert not Toleration("gpu", "Equal", "yes", "NoExecute").tolerates(TAINT)


def test_a_toleration_of_another_key_does_not_tolerate() -> None:
    assert not Toleration("other", "Exists", "", "").tolerates(TAINT)


def test_exists_with_a_key_tolerates_any_value_of_it() -> None:
    assert Toleration("gpu", "Exists", "", "").tolerates(TAINT)


def test_equal_without_a_value_tolerates_a_taint_without_one() -> None:
    assert Toleration("gpu", "Equal", "", "").tolerates({"key": "gpu", "effect": "NoSchedule"})


def test_a_toleration_is_read_with_kubernetes_defaults() -> None:
    w = waiting(
        pod(tolerations=[{"key": "gpu"}, {"key": "a", "operator": "Exists", "value": "v", "effect": "NoExecute"}])
    )
    assert w.tolerations == (Toleration("gpu", "Equal", "", ""), Toleration("a", "Exists", "v", "NoExecute"))
    assert w.may_run_on({}, [{"key": "gpu", "effect": "NoSchedule"}])
    assert not w.may_run_on({}, [{"key": "a", "value": "v", "effect": "NoSchedule"}])


def test_a_pod_without_its_metadata_spec_or_status_object_is_not_waiting() -> None:
    for field in ("metadata", "spec", "status"):
        p = pod()
        p[field] = None
        assert read_waiting(p, GPU) is None, field


def test_a_pod_without_uid_or_name_is_not_waiting() -> None:
    for field in ("uid", "name"):
        p = pod()
        del p["metadata"][field]
        assert read_waiting(p, GPU) is None, field


def test_one_gpu_is_enough_to_wait() -> None:
    assert waiting(pod(gpus=1)).gpus == 1


def test_a_node_selector_with_a_value_not_a_string_is_unreadable() -> None:
    assert read_waiting(pod(nodeSelector={"pool": 1}), GPU) is None
    assert read_waiting(pod(nodeSelector="pool=a"), GPU) is None


def test_without_a_namespace_or_a_readable_time_it_is_keyed_in_default_created_at_zero() -> None:
    p = pod()
    del p["metadata"]["namespace"]
    del p["metadata"]["creationTimestamp"]
    w = waiting(p)
    assert (w.key, w.created) == ("default/w", 0.0)


def required(*terms: Any) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


EXPRESSIONS = [{"key": "gpu", "operator": "In", "values": ["h100"]}]


def test_a_term_with_match_fields_matches_no_node_even_with_expressions() -> None:
    fields = [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
    w = waiting(pod(affinity=required({"matchFields": fields, "matchExpressions": EXPRESSIONS})))
    assert not w.may_run_on({"gpu": "h100"}, ())


def test_the_terms_after_an_unusable_one_are_still_read() -> None:
    w = waiting(pod(affinity=required({}, {"matchExpressions": EXPRESSIONS})))
    assert w.may_run_on({"gpu": "h100"}, ())
