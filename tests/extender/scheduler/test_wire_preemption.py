"""kube-scheduler's preempt verb on the wire (issue 51): ExtenderPreemptionArgs in both modes
(`NodeNameToMetaVictims` with nodeCacheCapable: true, full Pods in `NodeNameToVictims` otherwise),
every bound exactly at and one past its value, and the ExtenderPreemptionResult answered by UID in
Go's casing."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from gpuextender.extender.decide.preempt_victims import (
    AS_PROPOSED,
    DROPPED,
    EXTENDED,
    KEPT,
    NodePlan,
    PreemptionPlan,
    Proposal,
)
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.scheduler.wire import (
    MAX_BIND_FIELD_CHARS,
    MAX_VICTIMS_PER_NODE,
    PREEMPT_MAX_CANDIDATES,
    PreemptionArgs,
    encode,
    parse_preemption_args,
    preemption_result,
)
from gpuextender.extender.settings import MAX_CANDIDATES

POD = {"metadata": {"name": "big", "namespace": "ml", "uid": "preemptor"}}


def body(document: Any) -> bytes:
    return json.dumps(document).encode()


def meta_args(victims: Any, **top: Any) -> bytes:
    """nodeCacheCapable: true, as kube-scheduler sends it (the other map null)."""
    return body({"Pod": POD, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims, **top})


def full_pod(uid: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"victim-{uid}", "namespace": "ml", "uid": uid}, "spec": {"containers": []}}


def refused(data: bytes, **kwargs: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        parse_preemption_args(data, **kwargs)
    return info.value


# -- the two request modes -----------------------------------------------------------------------


def test_meta_victims_mode_reads_uids_and_violations() -> None:
    args = parse_preemption_args(
        meta_args(
            {
                "n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1},
                "n2": {"Pods": [{"UID": "u2"}, {"UID": "u3"}], "NumPDBViolations": 0},
            }
        )
    )
    assert isinstance(args, PreemptionArgs)
    assert args.pod == POD
    assert args.proposals == [Proposal("n1", ("u1",), 1), Proposal("n2", ("u2", "u3"), 0)]


def test_full_pods_mode_reads_uids_from_metadata() -> None:
    data = body(
        {
            "Pod": POD,
            "NodeNameToVictims": {
                "n1": {"Pods": [full_pod("u1"), full_pod("u2")], "NumPDBViolations": 2},
                "n2": {"Pods": [full_pod("u3")]},
            },
            "NodeNameToMetaVictims": None,
        }
    )
    args = parse_preemption_args(data)
    assert args.proposals == [Proposal("n1", ("u1", "u2"), 2), Proposal("n2", ("u3",), 0)]


def test_the_meta_map_is_read_when_both_are_sent() -> None:
    data = body(
        {
            "Pod": POD,
            "NodeNameToVictims": {"full": {"Pods": [full_pod("f1")]}},
            "NodeNameToMetaVictims": {"meta": {"Pods": [{"UID": "m1"}]}},
        }
    )
    assert parse_preemption_args(data).proposals == [Proposal("meta", ("m1",), 0)]


def test_a_full_pod_is_not_read_as_a_meta_pod() -> None:
    """In the full-Pod mode the UID is metadata.uid; a top-level UID alone is not one."""
    data = body({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"UID": "u1"}]}}})
    error = refused(data)
    assert error.code == "wrong_type"
    assert "metadata.uid" in error.message


def test_a_meta_pod_is_not_read_as_a_full_pod() -> None:
    error = refused(meta_args({"n1": {"Pods": [full_pod("u1")]}}))
    assert error.code == "wrong_type"
    assert "Pods[0].UID" in error.message


def test_no_candidates_is_an_empty_proposal_list() -> None:
    assert parse_preemption_args(meta_args({})).proposals == []


def test_keys_are_case_insensitive_everywhere_go_decodes_them() -> None:
    data = body(
        {
            "pod": POD,
            "NODENAMETOVICTIMS": None,
            "nodeNameToMetaVictims": {
                "n1": {"pods": [{"uid": "u1"}, {"Uid": "u2"}, {"uID": "u3"}], "numPdbViolations": 3},
                "n2": {"PODS": [{"UID": "u4"}], "NUMPDBVIOLATIONS": 1},
            },
        }
    )
    args = parse_preemption_args(data)
    assert args.pod == POD
    assert args.proposals == [Proposal("n1", ("u1", "u2", "u3"), 3), Proposal("n2", ("u4",), 1)]


def test_node_names_keep_their_case() -> None:
    args = parse_preemption_args(meta_args({"Node-A": {"Pods": [{"UID": "u"}]}}))
    assert args.proposals == [Proposal("Node-A", ("u",), 0)]


@pytest.mark.parametrize(
    "document",
    [
        {"Pod": POD, "pod": POD, "NodeNameToMetaVictims": {}},
        {"Pod": POD, "NodeNameToMetaVictims": {}, "nodenametometavictims": {}},
        {"Pod": POD, "NodeNameToVictims": None, "nodeNameToVictims": None, "NodeNameToMetaVictims": {}},
    ],
)
def test_top_level_keys_differing_only_in_case_are_refused(document: dict[str, Any]) -> None:
    assert refused(body(document)).code == "duplicate_key"


@pytest.mark.parametrize("pods", [None, "absent"])
def test_null_or_absent_pods_is_no_victims(pods: Any) -> None:
    entry: dict[str, Any] = {"NumPDBViolations": 0} if pods == "absent" else {"Pods": None, "NumPDBViolations": 0}
    assert parse_preemption_args(meta_args({"n1": entry})).proposals == [Proposal("n1", (), 0)]


def test_absent_pdb_violations_is_zero() -> None:
    assert parse_preemption_args(meta_args({"n1": {"Pods": [{"UID": "u1"}]}})).proposals == [Proposal("n1", ("u1",), 0)]


def test_the_fixture_shape_kube_scheduler_sends() -> None:
    """The exact request of the brief, as bytes (Go's casing, the unused map null)."""
    data = (
        b'{"Pod": {"metadata": {"name": "p", "uid": "x"}}, "NodeNameToVictims": null, '
        b'"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1}}}'
    )
    assert parse_preemption_args(data).proposals == [Proposal("n1", ("u1",), 1)]


# -- bounds ---------------------------------------------------------------------------------------


def candidates(n: int) -> dict[str, Any]:
    return {f"n{i}": {"Pods": [{"UID": f"u{i}"}]} for i in range(n)}


@pytest.mark.parametrize("full", [False, True])
def test_max_candidates_exactly_is_accepted_one_more_refused(full: bool) -> None:
    def make(n: int) -> bytes:
        if full:
            return body({"Pod": POD, "NodeNameToVictims": {f"n{i}": {"Pods": [full_pod(f"u{i}")]} for i in range(n)}})
        return meta_args(candidates(n))

    assert len(parse_preemption_args(make(3), max_candidates=3).proposals) == 3
    error = refused(make(4), max_candidates=3)
    assert error.code == "too_many_nodes"
    assert "4 candidate nodes; at most 3" in error.message


def test_the_default_candidate_bound_is_the_preempt_bound() -> None:
    """At most PREEMPT_MAX_CANDIDATES (below MAX_CANDIDATES): a candidate costs a filter's name many times."""
    assert PREEMPT_MAX_CANDIDATES < MAX_CANDIDATES
    n = PREEMPT_MAX_CANDIDATES
    assert len(parse_preemption_args(meta_args(candidates(n))).proposals) == n
    assert refused(meta_args(candidates(n + 1))).code == "too_many_nodes"


def test_max_victims_per_node_exactly_is_accepted_one_more_refused() -> None:
    at = [{"UID": f"u{i}"} for i in range(MAX_VICTIMS_PER_NODE)]
    (proposal,) = parse_preemption_args(meta_args({"n1": {"Pods": at}})).proposals
    assert len(proposal.victims) == MAX_VICTIMS_PER_NODE
    assert proposal.victims[0] == "u0" and proposal.victims[-1] == f"u{MAX_VICTIMS_PER_NODE - 1}"
    error = refused(meta_args({"n1": {"Pods": [*at, {"UID": "one-more"}]}}))
    assert error.code == "too_many_victims"
    assert f"{MAX_VICTIMS_PER_NODE + 1} victims; at most {MAX_VICTIMS_PER_NODE}" in error.message


@pytest.mark.parametrize("violations", [0, 1, MAX_VICTIMS_PER_NODE])
def test_pdb_violations_in_range_are_accepted(violations: int) -> None:
    data = meta_args({"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": violations}})
    assert parse_preemption_args(data).proposals == [Proposal("n1", ("u1",), violations)]


@pytest.mark.parametrize("violations", [-1, MAX_VICTIMS_PER_NODE + 1, 2**63, True, False, 1.0, "1", [], {}])
def test_pdb_violations_out_of_range_or_not_an_integer_are_refused(violations: Any) -> None:
    error = refused(meta_args({"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": violations}}))
    assert error.code == "wrong_type"
    assert f"NumPDBViolations must be an integer 0..{MAX_VICTIMS_PER_NODE}" in error.message


def test_pdb_violations_null_reads_as_zero_as_go_decodes_it() -> None:
    args = parse_preemption_args(meta_args({"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": None}}))
    assert args.proposals == [Proposal("n1", ("u1",), 0)]


@pytest.mark.parametrize("pods", [0, False, "", {}])
def test_pods_that_are_not_a_list_are_refused(pods: object) -> None:
    assert refused(meta_args({"n1": {"Pods": pods}})).code == "wrong_type"


@pytest.mark.parametrize(
    "entry", [{"Pods": [], "pods": []}, {"Pods": [{"UID": "a", "uid": "b"}]}], ids=["entry", "meta-pod"]
)
def test_a_key_spelled_twice_inside_an_entry_is_refused(entry: dict[str, object]) -> None:
    assert refused(meta_args({"n1": entry})).code == "duplicate_key"


def test_a_node_name_of_exactly_max_bind_field_chars_is_accepted_one_more_refused() -> None:
    at = "n" * MAX_BIND_FIELD_CHARS
    assert parse_preemption_args(meta_args({at: {"Pods": [{"UID": "u"}]}})).proposals == [Proposal(at, ("u",), 0)]
    error = refused(meta_args({at + "n": {"Pods": [{"UID": "u"}]}}))
    assert error.code == "wrong_type"
    assert f"at most {MAX_BIND_FIELD_CHARS} characters" in error.message


def test_an_empty_node_name_is_refused() -> None:
    assert refused(meta_args({"": {"Pods": [{"UID": "u"}]}})).code == "wrong_type"


@pytest.mark.parametrize("full", [False, True])
def test_a_uid_of_exactly_max_bind_field_chars_is_accepted_one_more_refused(full: bool) -> None:
    def make(uid: str) -> bytes:
        if full:
            return body({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [full_pod(uid)]}}})
        return meta_args({"n1": {"Pods": [{"UID": uid}]}})

    at = "u" * MAX_BIND_FIELD_CHARS
    assert parse_preemption_args(make(at)).proposals == [Proposal("n1", (at,), 0)]
    error = refused(make(at + "u"))
    assert error.code == "wrong_type"
    assert f"at most {MAX_BIND_FIELD_CHARS} characters" in error.message


@pytest.mark.parametrize("uid", ["", None, 7, True, ["u"], {"u": 1}])
@pytest.mark.parametrize("full", [False, True])
def test_an_empty_or_non_string_uid_is_refused(uid: Any, full: bool) -> None:
    if full:
        data = body({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [full_pod(uid)]}}})
    else:
        data = meta_args({"n1": {"Pods": [{"UID": uid}]}})
    error = refused(data)
    assert error.code == "wrong_type"
    assert "non-empty string" in error.message


def test_a_meta_pod_without_uid_is_refused() -> None:
    assert refused(meta_args({"n1": {"Pods": [{"Name": "p"}]}})).code == "wrong_type"


def test_a_full_pod_without_metadata_is_refused() -> None:
    data = body({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"spec": {}}]}}})
    assert refused(data).code == "wrong_type"


@pytest.mark.parametrize("victim", [None, "u1", 1, ["u1"]])
def test_a_victim_that_is_not_an_object_is_refused(victim: Any) -> None:
    error = refused(meta_args({"n1": {"Pods": [victim]}}))
    assert error.code == "wrong_type"
    assert "Pods[0]" in error.message


@pytest.mark.parametrize("pods", ["u1", 3, {"UID": "u1"}, True])
def test_pods_that_is_not_a_list_is_refused(pods: Any) -> None:
    error = refused(meta_args({"n1": {"Pods": pods}}))
    assert error.code == "wrong_type"
    assert ".Pods must be a list" in error.message


@pytest.mark.parametrize("entry", [None, [], "victims", 1])
def test_a_node_entry_that_is_not_an_object_is_refused(entry: Any) -> None:
    assert refused(meta_args({"n1": entry})).code == "wrong_type"


@pytest.mark.parametrize("victims", [[], "n1", 1, True])
def test_a_victims_map_that_is_not_an_object_is_refused(victims: Any) -> None:
    error = refused(meta_args(victims))
    assert error.code == "wrong_type"
    assert "NodeNameToMetaVictims must be an object" in error.message


def test_max_containers_exactly_is_accepted_one_more_refused() -> None:
    data = meta_args({"n1": {"Pods": [{"UID": "u1"}]}})
    containers = data.count(b"{") + data.count(b"[")
    assert len(data) > containers  # the count, not the length, decides here
    assert parse_preemption_args(data, max_containers=containers).proposals == [Proposal("n1", ("u1",), 0)]
    error = refused(data, max_containers=containers - 1)
    assert error.code == "too_complex"
    assert f"body has {containers} '{{' and '['" in error.message


def test_a_body_no_longer_than_max_containers_is_not_counted() -> None:
    data = meta_args({"n1": {"Pods": [{"UID": "u1"}]}})
    assert parse_preemption_args(data, max_containers=len(data)).proposals == [Proposal("n1", ("u1",), 0)]
    # All containers: as long as the bound, it reaches the parser; one byte longer, it is counted.
    assert refused(b"{" * 5, max_containers=5).code == "malformed_json"
    assert refused(b"{" * 6, max_containers=5).code == "too_complex"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"{", "malformed_json"),
        (b"", "malformed_json"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": }', "malformed_json"),
        (b"null", "wrong_type"),
        (b"[]", "wrong_type"),
        (b'{"NodeNameToMetaVictims": {}}', "missing_pod"),
        (b'{"Pod": null, "NodeNameToMetaVictims": {}}', "missing_pod"),
        (b'{"Pod": [], "NodeNameToMetaVictims": {}}', "wrong_type"),
        (b'{"Pod": "p", "NodeNameToMetaVictims": {}}', "wrong_type"),
        (b'{"Pod": {}}', "missing_nodes"),
        (b'{"Pod": {}, "NodeNameToVictims": null, "NodeNameToMetaVictims": null}', "missing_nodes"),
    ],
)
def test_refused_bodies(data: bytes, code: str) -> None:
    assert refused(data).code == code


# -- the answer -----------------------------------------------------------------------------------


def node_plan(node: str, action: str, victims: tuple[str, ...], violations: int = 0) -> NodePlan:
    return NodePlan(node, action, victims, violations, f"{action} for the test")


def test_the_answer_names_every_node_not_dropped_by_uid() -> None:
    plan = PreemptionPlan(
        (
            node_plan("kept", KEPT, ("u1",), 1),
            node_plan("gone", DROPPED, ()),
            node_plan("more", EXTENDED, ("u2", "u3"), 2),
            node_plan("unknown", AS_PROPOSED, ("u4",)),
        )
    )
    assert preemption_result(plan) == {
        "NodeNameToMetaVictims": {
            "kept": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1},
            "more": {"Pods": [{"UID": "u2"}, {"UID": "u3"}], "NumPDBViolations": 2},
            "unknown": {"Pods": [{"UID": "u4"}], "NumPDBViolations": 0},
        }
    }


def test_every_node_dropped_is_an_empty_map() -> None:
    plan = PreemptionPlan((node_plan("a", DROPPED, ()), node_plan("b", DROPPED, ())))
    assert preemption_result(plan) == {"NodeNameToMetaVictims": {}}
    assert encode(preemption_result(plan)) == b'{"NodeNameToMetaVictims":{}}'


def test_no_candidates_is_an_empty_map() -> None:
    assert preemption_result(PreemptionPlan(())) == {"NodeNameToMetaVictims": {}}


def test_the_answer_encodes_to_kube_schedulers_golden_json() -> None:
    """k8s.io/kube-scheduler/extender/v1 types_test.go's ExtenderPreemptionResult, byte for byte."""
    golden = b'{"NodeNameToMetaVictims":{"foo":{"Pods":[{"UID":"myuid"}],"NumPDBViolations":1}}}'
    plan = PreemptionPlan((node_plan("foo", KEPT, ("myuid",), 1),))
    assert encode(preemption_result(plan)) == golden
    assert orjson.dumps(preemption_result(plan)) == golden
    assert orjson.loads(golden) == preemption_result(plan)


def test_an_answer_parses_back_to_the_same_proposals() -> None:
    """The answer is itself ExtenderPreemptionArgs' meta map: read back, it names what was kept."""
    plan = PreemptionPlan(
        (
            node_plan("a", KEPT, ("u1",), 1),
            node_plan("b", DROPPED, ()),
            node_plan("c", EXTENDED, ("u2", "u3"), 2),
        )
    )
    answer = preemption_result(plan)
    again = parse_preemption_args(meta_args(answer["NodeNameToMetaVictims"]))
    assert again.proposals == [Proposal("a", ("u1",), 1), Proposal("c", ("u2", "u3"), 2)]


def test_a_placeholder_candidate_answered_as_proposed_stays_a_placeholder() -> None:
    """kube-scheduler since kubernetes/kubernetes#135486 sends a node that fits its own plugins with no
    victim as a placeholder (`Pods: []`) when a preempting extender is interested; an extender passes it
    through empty, rejects it by leaving it out, or names victims."""
    (proposal,) = parse_preemption_args(meta_args({"n1": {"Pods": [], "NumPDBViolations": 0}})).proposals
    assert proposal == Proposal("n1", (), 0)
    plan = PreemptionPlan((node_plan("n1", AS_PROPOSED, proposal.victims),))
    assert encode(preemption_result(plan)) == b'{"NodeNameToMetaVictims":{"n1":{"Pods":[],"NumPDBViolations":0}}}'


def test_a_node_kept_with_the_proposals_victims_is_answered_with_the_requests_own_list() -> None:
    """PreemptionArgs.plain: a node answered with exactly kube-scheduler's victims reuses the request's
    `[{"UID": ...}]` list, also where the plan names them in other (equal) string objects, as a plan
    kept from an earlier call does (VictimTable.judged); other victims are answered anew."""
    args = parse_preemption_args(
        meta_args(
            {
                "kept": {"Pods": [{"UID": "u1"}, {"UID": "u2"}], "NumPDBViolations": 0},
                "more": {"Pods": [{"UID": "u3"}], "NumPDBViolations": 0},
            }
        )
    )
    equal = tuple("".join(["u", str(i)]) for i in (1, 2))  # new string objects
    assert equal == args.plain["kept"][0] and equal[0] is not args.plain["kept"][0][0]
    plan = PreemptionPlan((node_plan("kept", KEPT, equal), node_plan("more", EXTENDED, ("u3", "u4"))))
    answered = preemption_result(plan, args.plain)["NodeNameToMetaVictims"]
    assert answered["kept"]["Pods"] is args.plain["kept"][1]
    assert answered["more"]["Pods"] == [{"UID": "u3"}, {"UID": "u4"}]
    assert answered["more"]["Pods"] is not args.plain["more"][1]
