"""PodGroups per source (state/pod_groups.py): list, watch events, bound."""

from __future__ import annotations

from gpuextender.extender.model.pod_group import COSCHEDULING, WORKLOAD, PodGroupSpec
from gpuextender.extender.state.pod_groups import PodGroups


def pg(name: str, minimum: object, namespace: str = "ns") -> dict[str, object]:
    return {"kind": "PodGroup", "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": minimum}}


def test_list_then_events() -> None:
    groups = PodGroups(COSCHEDULING)
    assert not groups.synced and groups.spec("ns", "a") is None
    groups.replace_all("PodGroup", [pg("a", 3), pg("b", "x")])
    assert groups.synced and groups.spec("ns", "a") == PodGroupSpec(3)
    assert groups.spec("ns", "b") is not None and groups.spec("ns", "b").size is None  # type: ignore[union-attr]
    assert groups.spec("other", "a") is None  # namespaced
    groups.upsert("PodGroup", pg("a", 4))
    assert groups.spec("ns", "a") == PodGroupSpec(4)
    groups.delete("PodGroup", {"metadata": {"name": "a", "namespace": "ns"}})
    assert groups.spec("ns", "a") is None
    groups.replace_all("PodGroup", [])
    assert len(groups) == 0


def test_at_most_the_bound_new_ones_past_it_are_not_read_updates_are() -> None:
    groups = PodGroups(COSCHEDULING, max_groups=2)
    groups.replace_all("PodGroup", [pg("a", 2), pg("b", 2), pg("c", 2)])
    assert len(groups) == 2 and groups.spec("ns", "c") is None and groups.dropped == 1
    groups.upsert("PodGroup", pg("a", 5))  # already kept: updated
    assert groups.spec("ns", "a") == PodGroupSpec(5)


def test_workload_pod_groups_read_their_gang_and_topology() -> None:
    groups = PodGroups(WORKLOAD)
    obj = {
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": "nvidia.com/gpu.clique"}]},
        },
    }
    groups.upsert("PodGroup", obj)
    assert groups.spec("ns", "w") == PodGroupSpec(2, "nvidia.com/gpu.clique")


def test_a_deleted_pod_group_is_heard_of_also_when_it_went_while_the_watch_was_down() -> None:
    groups = PodGroups(COSCHEDULING)
    gone: list[tuple[str, str]] = []
    groups.on_delete(lambda ns, name: gone.append((ns, name)))
    groups.replace_all("PodGroup", [pg("a", 2), pg("b", 2)])
    groups.delete("PodGroup", {"metadata": {"name": "a", "namespace": "ns"}})
    groups.delete("PodGroup", {"metadata": {"name": "never-seen", "namespace": "ns"}})
    assert gone == [("ns", "a")]
    groups.replace_all("PodGroup", [])  # a relist without b
    assert gone == [("ns", "a"), ("ns", "b")]
