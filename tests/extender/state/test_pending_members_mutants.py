"""Rules of the unbound group members (state/pending_members.py) that mutation testing (mutmut) found
no test holding; each test fails on a one-line change to the module: a pod without a UID is never a
member, and the one warning when the bound is passed, before the first list too."""

from __future__ import annotations

import logging

import pytest

from gpuextender.extender.state.pending_members import PendingMembers
from tests.extender.state.test_pending_members import GROUP, member


def test_a_member_with_an_empty_uid_is_not_counted() -> None:
    pending = PendingMembers()
    pending.replace_all("Pod", [member("")])
    assert pending.count(GROUP) == 0 and len(pending) == 0


BOUND_WARNING = (
    "more than 1 pending group member pods: holds are no longer released for members that do not exist, "
    "until the pod watch lists again"
)


def test_passing_the_bound_says_so_once_until_a_relist(caplog: pytest.LogCaptureFixture) -> None:
    pending = PendingMembers(max_pods=1)
    with caplog.at_level(logging.WARNING, logger="gpu_extender.groups"):
        pending.upsert("Pod", member("u1"))
        pending.upsert("Pod", member("u2"))  # past the bound before the first list: said
        pending.upsert("Pod", member("u3"))  # (again: not said again)
        assert caplog.messages == [BOUND_WARNING]
        pending.replace_all("Pod", [member("u1")])
        pending.upsert("Pod", member("u2"))  # past it again after a relist: said again
    assert caplog.messages == [BOUND_WARNING] * 2
    assert pending.count(GROUP) is None
