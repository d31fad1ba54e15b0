"""Rules of decide/fit_index.py that a one-line change would break unseen (mutation testing): a
group's domain rooms leave out the fits not offered and the stale ones and follow nodes as they
change; the stale set is found again when the bound or the clock moves back; the least recently
asked size is the one dropped; `best` trusts filter's passes only for the same size with nothing
changed since."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuextender.extender.decide import fit_index, whole_gpus
from gpuextender.extender.decide.fit_index import IDLE_ASKS, MAX_SIZES, MAX_TALLIES, FitIndex
from gpuextender.extender.decide.group_domains import level_index
from gpuextender.extender.settings import DecisionPolicy
from gpuextender.extender.state.gpu_summary import QUALITY_SIZES, NodeSummary
from tests.extender.decide.test_fit_index import NOW, STALE_AFTER, assert_same_outcome, fitting, spy_on_judge_nodes

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


def test_the_capacity_follows_the_largest_gpu_count_among_the_fits_left() -> None:
    """Spread scores b (8 idle) 10 and c (7 idle) 9 at capacity 8; at capacity 32 (the a nodes'
    count) both score 2, a tie cut in rotated order (c first)."""
    summaries = {f"a{i}": fitting(f"a{i}", idle=32) for i in range(3)}
    summaries |= {"b": fitting("b", idle=8), "c": fitting("c", idle=7)}
    summaries |= {f"u{i}": fitting(f"u{i}", idle=1) for i in range(8)}  # unfit: changes applied in place
    index = FitIndex(summaries)
    assert index.best(2, ["c", "b", "a0", "a1", "a2"], 0, 1, "spread", NOW, STALE_AFTER) == ["a0"]
    for name in ("a0", "a1"):
        del summaries[name]
        index.changed(name)
        index.catch_up()
    assert index.best(2, ["c", "b", "a2"], 0, 2, "spread", NOW, STALE_AFTER) == ["a2", "c"]  # still 32
    del summaries["a2"]
    index.changed("a2")
    assert index.best(2, ["c", "b"], 0, 1, "spread", NOW, STALE_AFTER) == ["b"]  # 8: the last 32 went


def test_a_new_index_finds_the_stale_nodes_for_a_bound_of_zero() -> None:
    summaries = {"a": fitting("a", received_at=NOW - 1), "b": fitting("b")}
    assert FitIndex(summaries).stale(NOW, 0.0) == {"a"}


def test_best_checks_filters_passes_again_after_a_change_and_the_stale_set_found_again() -> None:
    """A change applied and the stale set found again each count as a change: neither undoes the
    other, so `best` does not trust the passes from before them."""
    summaries = {f"n{i}": fitting(f"n{i}", idle=4) for i in range(4)}
    index = FitIndex(summaries)
    outcome = index.filter(2, list(summaries), {}, NOW, DecisionPolicy())  # kept alive: filter's last answer
    assert outcome is not None
    summaries["n0"] = fitting("n0", idle=1, received_at=NOW - 1)  # unfit, older than every fresh report
    index.changed("n0")
    index.catch_up()
    assert index.stale(NOW, STALE_AFTER) == set()  # found again
    assert index.best(2, outcome.passed, 0, 2, "spread", NOW, STALE_AFTER) is None


def test_best_checks_passes_filter_let_through_on_assumed_data() -> None:
    """No fresh node fits 2 GPUs (a has 1 idle): the stale s passes on assumed data (fail-open)."""
    summaries = {"a": fitting("a", idle=1), "s": fitting("s", received_at=OLD)}
    index = FitIndex(summaries)
    outcome = index.filter(2, ["a", "s"], {}, NOW, DecisionPolicy())  # kept alive: filter's last answer
    assert outcome is not None
    assert (outcome.passed, outcome.assumed, outcome.fallback) == (["s"], ["s"], False)
    assert index.best(2, outcome.passed, 0, 1, "spread", NOW, STALE_AFTER) is None


def test_best_checks_passes_filter_let_through_when_no_node_fits() -> None:
    """No node fits 2 GPUs: pass-all lets a through (a fallback), which `best` must not trust."""
    index = FitIndex({"a": fitting("a", idle=1)})
    outcome = index.filter(2, ["a"], {}, NOW, DecisionPolicy())  # kept alive: filter's last answer
    assert outcome is not None
    assert (outcome.passed, outcome.fallback) == (["a"], True)
    assert index.best(2, outcome.passed, 0, 1, "spread", NOW, STALE_AFTER) is None


@pytest.mark.parametrize("unknown", [0, 3], ids=["by-the-index", "one-by-one"])
def test_best_trusts_the_passes_filter_just_answered_without_looking_at_staleness_again(
    unknown: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also where filter judged the candidates one by one (mostly unknown ones, each with 1 GPU)."""
    summaries = {"a": fitting("a", idle=8), "b": fitting("b", idle=4)}
    index = FitIndex(summaries)
    xs = [f"x{i}" for i in range(unknown)]
    outcome = index.filter(2, ["b", "a", *xs], dict.fromkeys(xs, 1), NOW, DecisionPolicy())  # kept alive
    assert outcome is not None and outcome.passed == ["b", "a"]
    looked: list[float] = []

    def stale(now: float, stale_after: float) -> frozenset[str]:
        looked.append(now)
        return frozenset()

    monkeypatch.setattr(index, "stale", stale)
    assert index.best(2, outcome.passed, 0, 1, "spread", NOW, STALE_AFTER) == ["a"]
    assert looked == []
    assert index.best(2, ["b", "a"], 0, 1, "spread", NOW, STALE_AFTER) == ["a"]  # another list: checked
    assert looked == [NOW]


def test_best_checks_filters_passes_again_at_a_later_now() -> None:
    """The passes filter answered at NOW are fresh at NOW only: at a later `now` every node may have
    gone stale (a bug found by mutation testing: `best` trusted them at any `now`)."""
    summaries = {"a": fitting("a", idle=8), "b": fitting("b", idle=4)}
    index = FitIndex(summaries)
    outcome = index.filter(2, ["a", "b"], {}, NOW, DecisionPolicy(stale_after_s=STALE_AFTER))
    assert outcome is not None and outcome.passed == ["a", "b"]
    assert index.best(2, outcome.passed, 0, 1, "spread", NOW, STALE_AFTER) == ["a"]  # trusted
    assert index.best(2, outcome.passed, 0, 1, "spread", NOW + STALE_AFTER + 5, STALE_AFTER) is None


def test_a_report_with_the_same_numbers_moves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat: the node's fit is neither taken out nor put back (nor its reason, unfit)."""
    summaries = {"a": fitting("a"), **{f"u{i}": fitting(f"u{i}", idle=1) for i in range(7)}}
    index = FitIndex(summaries)
    assert index.filter(2, list(summaries), {}, NOW, DecisionPolicy()) is not None
    size = index._sizes[2]
    added: list[str] = []
    monkeypatch.setattr(fit_index._Size, "_add", lambda _size, name, *_: added.append(name))
    for name in ("a", "u0"):
        summaries[name] = replace(summaries[name], sequence=2)  # a new report, the same numbers
        index.changed(name)
    index.catch_up()
    assert index._sizes[2] is size  # 2 of 8 changed: applied in place
    assert added == []


def test_a_strategys_ranking_and_a_labels_tally_are_built_once_then_kept() -> None:
    summaries = {"a0": fitting("a0"), "b0": fitting("b0")}
    labels = level_index("clique", {"a0": {"clique": "a"}, "b0": {"clique": "b"}})
    index = FitIndex(summaries)
    assert index.domain_rooms(2, "clique", labels.value_of, list(summaries), NOW, STALE_AFTER) is not None
    size = index._sizes[2]
    assert size.ranking("spread") is size.ranking("spread")
    tally = size.tallies["clique"]
    assert index.domain_rooms(2, "clique", labels.value_of, list(summaries), NOW, STALE_AFTER) is not None
    assert size.tallies["clique"] is tally


def test_at_most_max_tallies_labels_are_tallied_and_a_new_inventory_keeps_the_others() -> None:
    summaries = {"a0": fitting("a0"), "b0": fitting("b0")}
    names = list(summaries)
    index = FitIndex(summaries)
    levels = [f"l{i}" for i in range(MAX_TALLIES)]
    for lv in levels:
        index.domain_rooms(2, lv, level_index(lv, {"a0": {lv: "a"}}).value_of, names, NOW, STALE_AFTER)
    size = index._sizes[2]
    assert list(size.tallies) == levels
    index.domain_rooms(2, "l0", level_index("l0", {"b0": {"l0": "b"}}).value_of, names, NOW, STALE_AFTER)
    assert list(size.tallies) == levels  # l0 built again for its new inventory, the others kept
    index.domain_rooms(2, "new", level_index("new", {"a0": {"new": "a"}}).value_of, names, NOW, STALE_AFTER)
    assert list(size.tallies) == ["new"]  # a label past MAX_TALLIES: the others dropped


def test_the_stale_set_is_found_once_and_kept_until_a_node_can_have_gone_stale() -> None:
    index = FitIndex({"a": fitting("a"), "b": fitting("b")})
    found = index.stale(NOW, STALE_AFTER)
    assert found == set()
    assert index.stale(NOW, STALE_AFTER) is found
    assert index.stale(NOW + STALE_AFTER, STALE_AFTER) is found  # at the bound: still fresh
    assert index.stale(NOW + STALE_AFTER + 0.5, STALE_AFTER) == {"a", "b"}


def test_filter_steps_aside_for_sizes_out_of_range() -> None:
    summaries = {"a": fitting("a", idle=8)}
    index = FitIndex(summaries)
    for k in (0, QUALITY_SIZES):
        assert index.filter(k, ["a"], {}, NOW, DecisionPolicy()) is None, k
    assert index._sizes == {}


def test_exactly_half_the_candidates_unknown_with_a_failure_named_twice_keeps_the_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quick bound counts f's second naming as unknown (3 of 4); the exact count is 2 of 4, not
    past half: the unknown ones are judged alone."""
    summaries = {"f": fitting("f", idle=1)}
    names = ["f", "f", "x0", "x1"]
    judged = spy_on_judge_nodes(monkeypatch)
    assert_same_outcome(FitIndex(summaries), summaries, 2, names, {}, NOW, DecisionPolicy())
    assert judged[0] == 2


def test_candidates_judged_one_by_one_none_fitting_pass_all_lets_the_soft_failures_through() -> None:
    """Mostly unknown candidates (2 of 3, each with 1 GPU): the index judges them one by one; none
    fits, so pass-all lets f (too few idle GPUs: a soft failure) through."""
    summaries = {"f": fitting("f", idle=1)}
    names = ["f", "x0", "x1"]
    index = FitIndex(summaries)
    assert_same_outcome(index, summaries, 2, names, {"x0": 1, "x1": 1}, NOW, DecisionPolicy())
    outcome = index.filter(2, names, {"x0": 1, "x1": 1}, NOW, DecisionPolicy())
    assert outcome is not None and (outcome.passed, outcome.fallback) == (["f"], True)
