"""Rules of decide/fit_index.py that a one-line change would break unseen (mutation testing): a
group's domain rooms leave out the fits not offered and the stale ones and follow nodes as they
change; the stale set is found again when the bound or the clock moves back; the least recently
asked size is the one dropped; `best` trusts filter's passes only for the same size with nothing
changed since."""

from __future__ import annotations

from dataclasses import replace

from gpuextender.extender.decide import whole_gpus
from gpuextender.extender.decide.fit_index import IDLE_ASKS, MAX_SIZES, FitIndex
from gpuextender.extender.decide.group_domains import level_index
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import QUALITY_SIZES, NodeSummary
from tests.extender.decide.test_fit_index import NOW, STALE_AFTER, fitting

OLD = NOW - STALE_AFTER - 1


def test_domain_rooms_leave_out_fits_not_offered_stale_or_unfit() -> None:
    summaries = {
        "a0": fitting("a0", idle=8),
        "a1": fitting("a1", idle=6),  # not offered
        "a2": fitting("a2", idle=4, received_at=OLD),  # stale
        "a3": fitting("a3", idle=1),  # does not fit 2
        "x": fitting("x", idle=5),
        "y": fitting("y", idle=4, received_at=OLD),  # unlabelled, stale
        "z": fitting("z", idle=3),  # unlabelled, not offered
    }
    labels = level_index("clique", {n: {"clique": "a"} for n in ("a0", "a1", "a2", "a3")})
    names = ["a0", "a2", "a3", "x", "y"]
    rooms = FitIndex(summaries).domain_rooms(2, "clique", labels.value_of, names, NOW, STALE_AFTER)
    assert rooms is not None
    assert (rooms.room, rooms.idle, rooms.nodes, rooms.unlabelled) == ({"a": 4}, {"a": 8}, {"a": 1}, {"x": 5})


def test_domain_rooms_follow_nodes_that_change_arrive_and_go() -> None:
    summaries = {"a0": fitting("a0", idle=8), "a1": fitting("a1", idle=4), "x": fitting("x", idle=5)}
    labels = level_index("clique", {"a0": {"clique": "a"}, "a1": {"clique": "a"}, "a2": {"clique": "a"}})
    index = FitIndex(summaries)
    names = ["a0", "a1", "a2", "x", "w"]
    rooms = index.domain_rooms(2, "clique", labels.value_of, names, NOW, STALE_AFTER)
    assert rooms is not None and (rooms.room, rooms.unlabelled) == ({"a": 6}, {"x": 5})
    summaries["a0"] = fitting("a0", idle=3)  # fewer idle
    summaries["a2"] = fitting("a2", idle=2)  # arrives
    summaries["w"] = fitting("w", idle=7)  # arrives, unlabelled
    del summaries["x"]  # goes
    for name in ("a0", "a2", "w", "x"):
        index.changed(name)
    rooms = index.domain_rooms(2, "clique", labels.value_of, names, NOW, STALE_AFTER)
    assert rooms is not None
    assert (rooms.room, rooms.idle, rooms.nodes, rooms.unlabelled) == ({"a": 4}, {"a": 9}, {"a": 3}, {"w": 7})


def test_domain_rooms_of_many_labels_stay_each_labels_own() -> None:
    summaries = {"a0": fitting("a0", idle=8), "b0": fitting("b0", idle=4)}
    names = list(summaries)
    index = FitIndex(summaries)
    levels = [f"l{i}" for i in range(6)]
    indexes = {lv: level_index(lv, {"a0": {lv: "a"}, "b0": {lv: lv}}) for lv in levels}
    for _ in range(2):
        for lv in levels:
            rooms = index.domain_rooms(4, lv, indexes[lv].value_of, names, NOW, STALE_AFTER)
            assert rooms is not None and rooms.room == {"a": 2, lv: 1}, lv


def test_stale_nodes_are_found_again_for_another_bound_or_an_earlier_now() -> None:
    summaries = {"a": fitting("a", received_at=NOW - 100), "b": fitting("b")}
    index = FitIndex(summaries)
    assert index.stale(NOW, 50) == {"a"}
    assert index.stale(NOW, 200) == set()
    assert index.stale(NOW, 50) == {"a"}
    assert index.stale(NOW - 60, 50) == set()
    assert index.stale(NOW, 50) == {"a"}


def test_a_stale_node_that_reports_again_is_fresh_and_a_fresh_node_that_goes_old_is_stale() -> None:
    summaries = {"a": fitting("a", received_at=OLD), "b": fitting("b")}
    index = FitIndex(summaries)
    assert index.stale(NOW, STALE_AFTER) == {"a"}
    summaries["a"] = fitting("a")
    index.changed("a")
    assert index.stale(NOW, STALE_AFTER) == set()
    summaries["c"] = fitting("c", received_at=OLD)  # a new node whose report is already old
    index.changed("c")
    assert index.stale(NOW, STALE_AFTER) == {"c"}
    assert index.stale(NOW + STALE_AFTER + 0.5, STALE_AFTER) == {"a", "b", "c"}


def test_the_least_recently_asked_size_is_the_one_dropped() -> None:
    summaries = {f"n{i}": fitting(f"n{i}", idle=12) for i in range(3)}
    names = list(summaries)
    index = FitIndex(summaries)
    policy = DecisionPolicy()
    for k in range(1, MAX_SIZES + 1):
        assert index.filter(k, names, {}, NOW, policy) is not None
    for _ in range(IDLE_ASKS + 1):  # size 1 asked again and again: size 2 is the least recently asked
        index.filter(1, names, {}, NOW, policy)
    assert index.filter(MAX_SIZES + 1, names, {}, NOW, policy) is not None


def test_best_checks_filters_passes_again_after_a_change_or_for_another_size() -> None:
    summaries = {f"n{i}": fitting(f"n{i}", idle=4) for i in range(4)}
    names = list(summaries)
    index = FitIndex(summaries)
    policy = DecisionPolicy()
    outcome = index.filter(2, names, {}, NOW, policy)  # kept alive: filter's last answer
    assert outcome is not None
    passed = outcome.passed
    assert passed == names
    assert index.best(2, passed, 0, 2, "spread", NOW, STALE_AFTER) is not None
    assert index.best(6, passed, 0, 2, "spread", NOW, STALE_AFTER) is None  # none of them fits 6
    outcome = index.filter(2, names, {}, NOW, policy)
    assert outcome is not None
    passed = outcome.passed
    summaries["n0"] = fitting("n0", idle=1)
    index.changed("n0")
    assert index.best(2, passed, 0, 2, "spread", NOW, STALE_AFTER) is None


def test_best_of_a_part_of_the_fits_keeps_the_definitions_set() -> None:
    summaries: dict[str, NodeSummary] = {f"n{i}": fitting(f"n{i}", idle=2 + i) for i in range(6)}
    passed = ["n1", "n4", "n2"]
    index = FitIndex(summaries)
    score = dict(whole_gpus.prioritize(2, passed, {}, summaries.get, NOW, DecisionPolicy(), "binpack"))
    got = index.best(2, passed, 0, 2, "binpack", NOW, STALE_AFTER)
    assert got == sorted(passed, key=lambda n: -score[n])[:2]


def test_domain_rooms_step_aside_for_sizes_out_of_range() -> None:
    summaries = {"a0": fitting("a0", idle=8)}
    labels = level_index("clique", {"a0": {"clique": "a"}})
    index = FitIndex(summaries)
    for k in (0, QUALITY_SIZES):
        assert index.domain_rooms(k, "clique", labels.value_of, ["a0"], NOW, STALE_AFTER) is None, k


def test_best_checks_a_list_filter_did_not_answer_even_with_nothing_changed() -> None:
    summaries = {"a": fitting("a"), "b": fitting("b"), "s": fitting("s", received_at=OLD)}
    index = FitIndex(summaries)
    outcome = index.filter(2, ["a", "b"], {}, NOW, DecisionPolicy())  # kept: filter's last answer
    assert outcome is not None
    assert outcome.passed == ["a", "b"]
    assert index.best(2, ["a", "s"], 0, 1, "spread", NOW, STALE_AFTER) is None  # s is stale


def test_ties_all_kept_among_a_part_of_the_fits_come_in_ranked_order() -> None:
    """Of a run of equal scores no longer than the places left, all are kept in ranked order."""
    summaries = {n: fitting(n) for n in ("a", "b", "c", "d", "e", "f")}
    index = FitIndex(summaries)
    assert index.best(2, ["b", "a"], 0, 2, "spread", NOW, STALE_AFTER) == ["a", "b"]


def test_best_keeps_nothing_when_asked_for_none_of_every_fit() -> None:
    summaries = {"a": fitting("a"), "b": fitting("b")}
    assert FitIndex(summaries).best(2, ["a", "b"], 0, 0, "spread", NOW, STALE_AFTER) == []


def test_best_ranks_the_classes_left_after_nodes_of_a_class_stop_fitting() -> None:
    summaries = {n: fitting(n, q=2) for n in ("a", "b", "c")} | {"d": fitting("d", q=0)}
    summaries |= {f"u{i}": fitting(f"u{i}", idle=1) for i in range(8)}  # unfit: changes applied in place
    index = FitIndex(summaries)
    assert set(index.best(2, ["a", "b", "c", "d"], 0, 4, "spread", NOW, STALE_AFTER) or ()) == {"a", "b", "c", "d"}
    for name in ("a", "b"):
        summaries[name] = fitting(name, q=2, idle=1)
        index.changed(name)
    assert index.best(2, ["c", "d"], 0, 3, "spread", NOW, STALE_AFTER) == ["d", "c"]
    summaries["c"] = fitting("c", q=2, idle=1)
    index.changed("c")
    assert index.best(2, ["d"], 0, 3, "spread", NOW, STALE_AFTER) == ["d"]


def test_a_node_whose_quality_list_stops_short_is_ranked_by_quality_for() -> None:
    summaries = {"a": replace(fitting("a", idle=4), quality=(0, 0), set_tiers=(0, 0, 1, 2), degraded_idle_gpus=1)}
    summaries["b"] = fitting("b", idle=4, q=0)
    names = list(summaries)
    want = whole_gpus.prioritize(2, names, {}, summaries.get, NOW, DecisionPolicy(), "spread")
    assert FitIndex(summaries).scores(2, names, "spread", NOW, STALE_AFTER) == want
