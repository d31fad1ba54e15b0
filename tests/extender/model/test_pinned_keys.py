"""The node label keys a pod's own spec pins to one value (model/pod_group.pinned_keys): what
Kueue's topology-aware scheduling writes to put a group in the domain it chose, so that the
extender never sends such a group to wait for another domain (issue 53 item 1)."""

from __future__ import annotations

from typing import Any

from gpuextender.extender.model.pod_group import MAX_PINNING_READ, pinned_keys


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": spec}


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    node_terms = [{"matchExpressions": expressions} for expressions in terms]
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}
        }
    }


def is_in(key: str, *values: str, operator: str = "In") -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def test_a_node_selectors_keys_are_pinned() -> None:
    assert pinned_keys(pod({"nodeSelector": {"clique": "a", "kubernetes.io/hostname": "n1"}})) == {
        "clique",
        "kubernetes.io/hostname",
    }


def test_required_affinity_pins_a_key_every_term_names_with_one_value() -> None:
    assert pinned_keys(pod(required([is_in("clique", "a")]))) == {"clique"}
    assert pinned_keys(pod(required([is_in("clique", "a", "b")]))) == frozenset()  # two values: no pin
    assert pinned_keys(pod(required([is_in("clique", "a", operator="NotIn")]))) == frozenset()
    # Terms are ORed: a key pinned only where every term pins it.
    assert pinned_keys(pod(required([is_in("clique", "a")], [is_in("clique", "b")]))) == {"clique"}
    assert pinned_keys(pod(required([is_in("clique", "a")], [is_in("zone", "z")]))) == frozenset()


def test_anything_malformed_pins_nothing() -> None:
    for spec in (
        {"nodeSelector": ["clique"]},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}},
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}},
        required([{"key": 3, "operator": "In", "values": ["a"]}]),
        required([{"key": "clique", "operator": "In", "values": "a"}]),
        {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": ["t"]}}
            }
        },
    ):
        assert pinned_keys(pod(spec)) == frozenset(), spec
    assert pinned_keys({"spec": None}) == frozenset()


def test_reading_is_bounded_at_exactly_its_limit() -> None:
    terms = [[is_in("clique", "a")]] * MAX_PINNING_READ
    assert pinned_keys(pod(required(*terms))) == {"clique"}
    assert pinned_keys(pod(required(*terms, [is_in("clique", "a")]))) == frozenset()  # one term too many
    expressions = [is_in(f"k{i}", "v") for i in range(MAX_PINNING_READ + 1)]
    assert len(pinned_keys(pod(required(expressions)))) == MAX_PINNING_READ
    selector = {f"k{i}": "v" for i in range(MAX_PINNING_READ + 1)}
    assert len(pinned_keys(pod({"nodeSelector": selector}))) == MAX_PINNING_READ
