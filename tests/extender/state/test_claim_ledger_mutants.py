"""Rules of the claim ledger (state/claim_ledger.py) that mutation testing (mutmut) found no test
holding; each test fails on a one-line change to the module: a ledger not listed yet is empty, knows
every change since version 0 and takes watch events; a node's version changes with its first claim;
an allocated claim reads as allocated under its key; tolerations are those of the GPU requests of
every claim still to allocate, whatever claims come before it; each unreadable claim is counted and
said in the log, and a claim that becomes unreadable is dropped with its devices."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpuextender.extender.model.dra import ClaimRead, Toleration, parse_resource_claim
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.state.claim_ledger import ALLOCATED, RESOURCE_CLAIM_KIND, ClaimLedger
from tests.extender.dra_objects import allocated_claim

GPU_CLASS = "gpu.nvidia.com"


def to_allocate(name: str, device_class: str = GPU_CLASS) -> dict[str, Any]:
    obj = allocated_claim(name, "n1", [])
    del obj["status"]
    obj["spec"]["devices"]["requests"] = [
        {
            "name": "r",
            "exactly": {"deviceClassName": device_class, "tolerations": [{"key": name, "operator": "Exists"}]},
        }
    ]
    return obj


def unreadable(name: str) -> dict[str, Any]:
    obj = allocated_claim(name, "n1", ["gpu-0"])
    obj["spec"]["devices"]["requests"] = "not a list"
    return obj


def test_a_ledger_not_listed_yet_is_empty_and_takes_watch_events() -> None:
    claims = ClaimLedger()
    assert (len(claims), claims.claim("default/a"), claims.allocated_count()) == (0, None, 0)
    assert (claims.allocated_on("n1"), claims.holders_on("n1")) == (frozenset(), {})
    assert claims.nodes_changed_since(0) == set() and claims.node_version("n1") == 0
    claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim("a", "n1", ["gpu-0"]))
    assert len(claims) == 1 and claims.allocated_count() == 1
    assert claims.nodes_changed_since(0) == {"n1"}


def test_a_nodes_version_changes_with_its_first_claim() -> None:
    claims = ClaimLedger()
    before = claims.node_version("n1")
    claims.upsert(RESOURCE_CLAIM_KIND, allocated_claim("a", "n1", ["gpu-0"]))
    assert claims.node_version("n1") != before


def test_an_allocated_claim_reads_as_allocated_under_its_key() -> None:
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-0"])])
    assert claims.read(["default/a"], {GPU_CLASS}, {}) == (ClaimRead("default/a", ALLOCATED),)


def test_tolerations_of_a_claim_to_allocate_after_others_are_read() -> None:
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-0"]), to_allocate("t")])
    keys = ["default/missing", "default/a", "default/t"]
    assert claims.tolerations(keys, {GPU_CLASS}) == (Toleration("t", "Exists"),)


def test_tolerations_of_a_request_for_no_gpu_class_are_not_read() -> None:
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [to_allocate("t", "other.example.com")])
    assert claims.tolerations(["default/t"], {GPU_CLASS}) == ()


def test_each_unreadable_claim_is_counted_and_said(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(InvalidInput) as error:
        parse_resource_claim(unreadable("a"))
    claims = ClaimLedger()
    with caplog.at_level(logging.WARNING, logger="gpu_extender.claims"):
        claims.replace_all(RESOURCE_CLAIM_KIND, [unreadable("a"), unreadable("b")])
    assert claims.invalid == 2 and len(claims) == 0
    assert caplog.messages[0] == f"claims: skipped: {error.value.message}"


def test_a_claim_that_becomes_unreadable_is_dropped_with_its_devices() -> None:
    claims = ClaimLedger()
    claims.replace_all(RESOURCE_CLAIM_KIND, [allocated_claim("a", "n1", ["gpu-0"])])
    version = claims.version
    claims.upsert(RESOURCE_CLAIM_KIND, unreadable("a"))
    assert claims.claim("default/a") is None and claims.allocated_on("n1") == frozenset()
    assert claims.version == version + 1 and claims.invalid == 1
