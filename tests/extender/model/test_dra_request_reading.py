"""What explain says of one request of a pod's ResourceClaim (model/dra.RequestReading.why): the
count, and, for a firstAvailable request, which of its choices was counted (a mutation pass found the
choice count's bound untested)."""

from __future__ import annotations

from gpuextender.extender.model.dra import RequestReading


def test_one_choice_says_no_choices_and_two_say_the_smallest_was_counted() -> None:
    assert RequestReading("r", gpus=2, choices=1).why() == "2 whole GPU(s)"
    assert RequestReading("r", gpus=2, choices=2).why() == "2 whole GPU(s), the smallest of 2 choices"
    assert (
        RequestReading("r", mig=("1g.10gb", 3), choices=2).why() == "3 MIG device(s) 1g.10gb, the smallest of 2 choices"
    )
    assert RequestReading("r", gpus=1, all_mode=True).why() == "1 whole GPU(s) (All: at least one)"
    assert RequestReading("r", skipped="not a GPU class").why() == "not a GPU class"
