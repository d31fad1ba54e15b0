"""The race inside a burst: the binding gate (binding_gate.py), the bind verb (binding.py) and their
wire format, with bounds at exactly their values. The real kube-scheduler runs them in
tests/kube/test_burst.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from gpuextender.extender.flags import ConfigError, build_config
from gpuextender.extender.model.pod_request import read_pod
from gpuextender.extender.model.untrusted import InvalidInput
from gpuextender.extender.scheduler.binding import MAX_REMEMBERED, Bindings
from gpuextender.extender.scheduler.binding_gate import BindingGate
from gpuextender.extender.scheduler.wire import MAX_BIND_FIELD_CHARS, BindingArgs, parse_binding_args
from gpuextender.extender.settings import MAX_BINDING_WAIT_S
from gpuextender.extender.state.pod_ledger import POD_KIND, PodLedger


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def idle(counts: dict[str, int]) -> Any:
    return counts.get


# -- the gate ---------------------------------------------------------------------------------------


def test_a_binding_that_cannot_change_the_verdict_does_not_hold_the_filter() -> None:
    clock = Clock()
    gate = BindingGate(0.5, clock)
    gate.decided("a", 1, frozenset({"n1", "n2"}))
    # Were `a` bound to either node, 2 idle GPUs would be left: a 2-GPU pod still fits both.
    waited = asyncio.run(gate.settle("b", 2, idle({"n1": 3, "n2": 4})))
    assert waited == 0 and gate.waited == 0 and gate.open_count() == 1


def test_only_another_pods_open_binding_counts_and_a_retry_closes_its_own() -> None:
    gate = BindingGate(0.5, Clock())
    gate.decided("a", 1, frozenset({"n1"}))
    assert not gate.others_open("a")  # its own earlier cycle, now retried: closed
    assert gate.open_count() == 0
    gate.decided("a", 1, frozenset({"n1"}))
    gate.decided("b", 1, frozenset({"n1"}))
    assert gate.others_open("a")
    assert gate.open_count() == 1


@pytest.mark.parametrize(("left_idle", "waits"), [(2, False), (1, True)])
def test_the_risk_bound_is_exact(left_idle: int, waits: bool) -> None:
    """n1 has `left_idle + 1` idle GPUs; `a` (1 GPU) may take one; `b` needs 2: at risk iff idle - 1 < 2."""
    clock = Clock()
    gate = BindingGate(0.5, clock)
    gate.decided("a", 1, frozenset({"n1"}))

    async def scenario() -> float:
        async def bind_later() -> None:
            await asyncio.sleep(0.01)
            gate.bound("a")

        task = asyncio.create_task(bind_later())
        waited = await gate.settle("b", 2, idle({"n1": left_idle + 1}))
        await task
        return waited

    asyncio.run(scenario())
    assert gate.waited == (1 if waits else 0)
    assert gate.races == 0


@pytest.mark.parametrize(("idle_n1", "risky"), [(3, 0), (2, 2)])
def test_open_bindings_add_up_on_a_node_they_may_all_go_to(idle_n1: int, risky: int) -> None:
    """`a` and `b` (1 GPU each) may both go to n1, the best-scored node: kube-scheduler's scores do
    not move until it sees a binding, so a burst sends them all there. With 2 idle GPUs neither alone
    leaves `c` (1 GPU) short, both do: 2 - 2 < 1. With 3: 3 - 2 = 1, no wait. n2 has room for all."""
    gate = BindingGate(0.5, Clock())
    gate.decided("a", 1, frozenset({"n1", "n2"}))
    gate.decided("b", 1, frozenset({"n1", "n2"}))
    assert len(gate._at_risk(1, idle({"n1": idle_n1, "n2": 8}))) == risky
    # One of them on another node only: its load does not count on n1.
    gate.bound("b")
    gate.decided("b", 1, frozenset({"n2"}))
    assert len(gate._at_risk(1, idle({"n1": 2, "n2": 8}))) == 0


def test_unknown_idle_counts_are_at_risk_and_mig_pods_always_wait() -> None:
    gate = BindingGate(0.5, Clock())
    gate.decided("a", 1, frozenset({"silent"}))
    assert [e.need for e in gate._at_risk(1, idle({}))] == [1]  # no fresh data: unknown is never room
    gate = BindingGate(0.5, Clock())
    gate.decided("mig", 0, frozenset({"n1"}))
    assert len(gate._at_risk(1, idle({"n1": 8}))) == 1


@pytest.mark.parametrize(
    ("data", "at_risk"),
    [("none", False), ("fresh-roomy", False), ("fresh-tight", True), ("stale-at-the-bound", False), ("stale", True)],
)
def test_a_node_without_agent_data_never_holds_a_filter_but_stale_data_does(data: str, at_risk: bool) -> None:
    """No agent data: the verdict is kube-scheduler's own count, which has the open binding in it
    (binding_gate's docstring). Stale data (just past --stale-after) is unknown, as before."""
    from gpuextender.common.idle_rule import IdleRule
    from gpuextender.extender.state.gpu_state import GpuState
    from tests.extender.builders import gpu, report

    stale_after = 30.0
    state = GpuState(IdleRule())
    received = {"stale": 100.0 - stale_after - 0.001, "stale-at-the-bound": 100.0 - stale_after}.get(data, 100.0)
    idle_gpus = 2 if data == "fresh-tight" else 8
    if data != "none":
        state.ingest(
            report("n1", [gpu(i, 0 if i < idle_gpus else 90, 1 if i < idle_gpus else 80) for i in range(8)]), received
        )
    # The gate's clock moves only when the test moves it: a loaded machine may take any time from
    # here to the settle, and a binding that expired meanwhile would be counted without a wait.
    clock = Clock()
    gate = BindingGate(0.01, clock)
    gate.decided("a", 1, frozenset({"n1"}))
    pod = {
        "metadata": {"uid": "b"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }

    async def scenario() -> None:
        settle = asyncio.create_task(Bindings(gate).settle(pod, ("nvidia.com/gpu",), state.summary, 100.0, stale_after))
        while not gate.waited and not settle.done():
            await asyncio.sleep(0)
        clock.now += 0.01  # the binding's deadline: it expires unseen
        await settle

    asyncio.run(scenario())
    assert (gate.waited, gate.expired) == ((1, 1) if at_risk else (0, 0))


def test_the_wait_ends_at_the_deadline_and_a_late_binding_counts_as_a_race() -> None:
    async def scenario() -> tuple[float, BindingGate]:
        gate = BindingGate(0.05, time.monotonic)
        gate.decided("a", 1, frozenset({"n1"}))
        waited = await gate.settle("b", 1, idle({"n1": 1}))
        gate.bound("a")  # after the wait gave up
        return waited, gate

    waited, gate = asyncio.run(scenario())
    assert 0.04 <= waited < 1.0
    assert (gate.waited, gate.expired, gate.races, gate.open_count()) == (1, 1, 1, 0)


def test_with_the_gate_off_a_risky_filter_decides_at_once_and_counts_the_race() -> None:
    gate = BindingGate(0.0, Clock())
    gate.decided("a", 1, frozenset({"n1"}))
    assert asyncio.run(gate.settle("b", 1, idle({"n1": 1}))) == 0
    gate.bound("a")
    assert gate.races == 1 and gate.waited == 0


def test_a_retried_pod_closes_its_own_earlier_entry() -> None:
    gate = BindingGate(0.5, Clock())
    gate.decided("a", 1, frozenset({"n1"}))
    assert asyncio.run(gate.settle("a", 1, idle({"n1": 1}))) == 0
    assert gate.open_count() == 0


def test_a_binding_that_arrives_wakes_the_waiting_filter_at_once() -> None:
    async def scenario() -> float:
        gate = BindingGate(1.0, time.monotonic)
        gate.decided("a", 1, frozenset({"n1"}))
        asyncio.get_running_loop().call_later(0.02, gate.bound, "a")
        return await gate.settle("b", 1, idle({"n1": 1}))

    assert asyncio.run(scenario()) < 0.5


# -- the wire -----------------------------------------------------------------------------------------


def body(**fields: Any) -> bytes:
    base = {"PodName": "p", "PodNamespace": "ns", "PodUID": "u-1", "Node": "n1"}
    return json.dumps({**base, **fields}).encode()


def test_binding_args_are_read_case_insensitively() -> None:
    raw = b'{"podname": "p", "PODNAMESPACE": "ns", "PodUid": "u", "node": "n"}'
    assert parse_binding_args(raw) == BindingArgs("p", "ns", "u", "n")


@pytest.mark.parametrize("field", ["PodName", "PodNamespace", "PodUID", "Node"])
def test_each_field_is_bounded_exactly(field: str) -> None:
    attribute = {"PodName": "pod_name", "PodNamespace": "namespace", "PodUID": "uid", "Node": "node"}[field]
    assert getattr(parse_binding_args(body(**{field: "x" * MAX_BIND_FIELD_CHARS})), attribute) == "x" * 253
    with pytest.raises(InvalidInput) as exc:
        parse_binding_args(body(**{field: "x" * (MAX_BIND_FIELD_CHARS + 1)}))
    assert exc.value.code == "too_long"
    for bad in ("", None, 3, ["p"]):
        with pytest.raises(InvalidInput) as exc:
            parse_binding_args(body(**{field: bad}))
        assert exc.value.code == "missing_field"


@pytest.mark.parametrize("raw", [b"", b"[]", b"{", b'"x"'])
def test_malformed_binding_bodies_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidInput):
        parse_binding_args(raw)


# -- the bind verb -----------------------------------------------------------------------------------


class FakeBinder:
    """Stands in for PodBinder's API call (tests/kube/test_burst.py binds for real); records calls."""

    def __init__(self, error: str = "") -> None:
        self.error = error
        self.calls: list[BindingArgs] = []
        self.ledger_during: list[int] = []
        self.ledger: PodLedger | None = None

    async def bind(self, b: BindingArgs) -> str:
        self.calls.append(b)
        if self.ledger is not None:
            self.ledger_during.append(len(self.ledger))
        return self.error


def pod(uid: str = "u-1", gpus: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid, "labels": {"ome.io/inferenceservice": "llama"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def bindings(error: str = "") -> tuple[Bindings, PodLedger, FakeBinder]:
    clock = Clock()
    ledger = PodLedger(("nvidia.com/gpu",), clock=clock)
    ledger.replace_all(POD_KIND, [])
    binder = FakeBinder(error)
    binder.ledger = ledger
    b = Bindings(BindingGate(0.5, clock), clock, binder, ledger)  # type: ignore[arg-type]
    ledger.on_bound(b.gate.bound)
    return b, ledger, binder


def test_bind_records_the_pod_before_the_binding_is_made() -> None:
    b, ledger, binder = bindings()
    b.filtered("u-1", read_pod(pod(), ("nvidia.com/gpu",), "spread", ""), ["n1", "n2"])
    assert b.gate.open_count() == 1
    answer = asyncio.run(b.bind(BindingArgs("p", "ns", "u-1", "n2")))
    assert answer == {"Error": ""}
    assert binder.ledger_during == [1]  # in the ledger while the API call ran
    (record,) = ledger.pods_on("n2")
    assert (record.key, record.gpus, record.phase, record.inference_service) == ("ns/p", 2, "Pending", "llama")
    assert b.gate.open_count() == 0 and b.binds == {"bound": 1, "error": 0}


def test_a_refused_binding_takes_the_pod_out_and_answers_the_error() -> None:
    b, ledger, _ = bindings("binding ns/p to n2: HTTP 409: pod already bound")
    b.filtered("u-1", read_pod(pod(), ("nvidia.com/gpu",), "spread", ""), ["n2"])
    answer = asyncio.run(b.bind(BindingArgs("p", "ns", "u-1", "n2")))
    assert answer == {"Error": "binding ns/p to n2: HTTP 409: pod already bound"}
    assert len(ledger) == 0 and b.binds == {"bound": 0, "error": 1}


def test_without_an_api_server_bind_says_so() -> None:
    b = Bindings(BindingGate(0.5, Clock()))
    answer = asyncio.run(b.bind(BindingArgs("p", "ns", "u-1", "n2")))
    assert "without --kubernetes" in answer["Error"] and "bindVerb" in answer["Error"]


def test_pods_filter_did_not_answer_or_that_need_no_gpu_open_nothing() -> None:
    b, _, _ = bindings()
    b.filtered("u-1", read_pod(pod(), ("nvidia.com/gpu",), "spread", ""), [])
    b.filtered("u-2", read_pod(pod("u-2", 0), ("nvidia.com/gpu",), "spread", ""), ["n1"])
    b.filtered("", read_pod(pod(""), ("nvidia.com/gpu",), "spread", ""), ["n1"])
    assert b.gate.open_count() == 0


def test_remembered_pods_are_bounded_exactly() -> None:
    b, _, _ = bindings()
    request = read_pod(pod(), ("nvidia.com/gpu",), "spread", "")
    for i in range(MAX_REMEMBERED):
        b.filtered(f"u{i}", request, ["n1"])
    assert len(b._remembered) == MAX_REMEMBERED and "u0" in b._remembered
    b.filtered("one-more", request, ["n1"])
    assert len(b._remembered) == MAX_REMEMBERED and "u0" not in b._remembered  # the oldest goes


# -- the flag -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", str(MAX_BINDING_WAIT_S)])
def test_binding_wait_bounds_are_inclusive(value: str) -> None:
    assert build_config(["--kubernetes", "--binding-wait", value], {}).api.binding_wait_s == float(value)


@pytest.mark.parametrize("value", ["-0.001", "1.501", "nan", "inf"])
def test_binding_wait_outside_its_bounds_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="--binding-wait"):
        build_config(["--kubernetes", "--binding-wait", value], {})


def test_without_kubernetes_nothing_waits() -> None:
    """No pod watch and no bind verb: no binding can ever be seen, so waiting would only delay."""
    assert build_config([], {}).api.binding_wait_s == 0.0
    assert build_config(["--kubernetes"], {}).api.binding_wait_s == 0.5


def test_a_retried_bind_refused_as_already_bound_keeps_the_watchs_record() -> None:
    """The first bind timed out after the Binding was made; the watch recorded the pod; kube-scheduler
    retries and the API server answers 409: the pod is bound, and stays in the ledger."""
    b, ledger, _ = bindings("binding ns/p to n2: HTTP 409: pod p is already assigned to node n2")
    watched = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"nodeName": "n2", "containers": pod()["spec"]["containers"]},
        "status": {"phase": "Pending"},
    }
    ledger.upsert(POD_KIND, watched)
    b.filtered("u-1", read_pod(pod(), ("nvidia.com/gpu",), "spread", ""), ["n2"])
    assert asyncio.run(b.bind(BindingArgs("p", "ns", "u-1", "n2")))["Error"].endswith("already assigned to node n2")
    assert [p.uid for p in ledger.pods_on("n2")] == ["u-1"]


def test_a_gang_member_never_waits_for_a_member_of_its_own_gang() -> None:
    """kube-scheduler binds a gang only once every member is placed: waiting for a member's binding
    would always run out. Another gang's, or a single pod's, open binding still holds it."""
    clock = Clock()
    gate = BindingGate(0.5, clock)
    gate.decided("a", 8, frozenset({"n1"}), gang="ns/workload/g")
    tight = idle({"n1": 8})
    assert asyncio.run(gate.settle("b", 8, tight, gang="ns/workload/g")) == 0 and gate.waited == 0
    assert gate._at_risk(8, tight, gang="ns/workload/other") and gate._at_risk(8, tight)
