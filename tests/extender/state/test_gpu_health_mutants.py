"""Rules of a GPU's problem value (state/gpu_health.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a critical XID names the newest XID,
and only when XidCritical is the first reason; the value is trimmed of leading and trailing dashes
and dots, also where the cut at 63 characters ends on one; a reason with nothing allowed in it
reads "unknown"."""

from __future__ import annotations

from gpuextender.extender.state.gpu_health import problem_of
from gpuextender.v1 import gpu_state_pb2 as pb


def sick(*reasons: str, xids: tuple[int, ...] = ()) -> pb.GpuSample:
    g = pb.GpuSample(index=0, uuid="GPU-0", health=pb.HEALTH_UNHEALTHY)
    g.health_reasons.extend(reasons)
    for xid in xids:
        g.xids.add(xid=xid)
    return g


def test_a_critical_xid_names_the_newest_xid() -> None:
    assert problem_of(sick("XidCritical", xids=(48, 79, 94))) == "xid-94"


def test_xids_name_the_value_only_when_the_first_reason_is_xid_critical() -> None:
    assert problem_of(sick("GpuIsLost", "XidCritical", xids=(79,))) == "gpu-is-lost"


def test_leading_and_trailing_dashes_and_dots_are_trimmed() -> None:
    assert problem_of(sick("!.Lost.!")) == "lost"


def test_a_cut_ending_on_a_dash_is_trimmed_of_it() -> None:
    assert problem_of(sick("a" * 62 + "-" + "b" * 10)) == "a" * 62


def test_a_reason_with_nothing_allowed_in_it_reads_unknown() -> None:
    assert problem_of(sick("!!!")) == "unknown"
