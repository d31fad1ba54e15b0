"""The idle rule's one definition (common/idle_rule.py) against the copy state/gpu_summary.py inlines
on every report, on generated GPUs: every reading present or absent, at, below and above both
thresholds, healthy or not. The agent's report gate calls the definition itself."""

from __future__ import annotations

import itertools
import random

from gpuextender.common.idle_rule import IdleRule, gpu_is_idle, mig_instance_is_idle
from gpuextender.extender.state.gpu_summary import summarize
from gpuextender.v1 import gpu_state_pb2 as pb

GIB = 1024**3


NO_GPM = "no GPM"  # the GpmReadings message unset (GPM not supported)
GPM_WITHOUT_SM = "GPM, no SM activity"  # the message set, its sm_active_percent absent


def _gpu(
    util: int | None, used_bytes: int | None, total_bytes: int | None, healthy: bool, sm: float | str = NO_GPM
) -> pb.GpuSample:
    g = pb.GpuSample(index=0, uuid="GPU-0", healthy=healthy)
    if sm == GPM_WITHOUT_SM:
        g.gpm.SetInParent()
    elif isinstance(sm, float):
        g.gpm.sm_active_percent = sm
    if util is not None:
        g.utilization_gpu_percent = util
    if used_bytes is not None:
        g.memory_used_bytes = used_bytes
    if total_bytes is not None:
        g.memory_total_bytes = total_bytes
    return g


def _idle_in_summary(g: pb.GpuSample, rule: IdleRule) -> bool:
    report = pb.NodeReport(node_name="n", sequence=1, gpus=[g])
    return summarize(report, rule, 0.0).idle_gpus == 1


def test_the_inlined_copy_in_summarize_equals_the_definition() -> None:
    rules = [IdleRule(), IdleRule(1.0, 1.0), IdleRule(100.0, 100.0), IdleRule(10.0, 12.5)]
    rules += [IdleRule(30.0, 50.0, 10.0), IdleRule(1.0, 1.0, 0.5), IdleRule(100.0, 100.0, 100.0)]
    utils = [None, 0, 1, 9, 10, 11, 29, 30, 31, 99, 100]
    memory = [(None, None), (None, 80 * GIB), (0, None), (0, 0), (0, 80 * GIB), (8 * GIB, 80 * GIB)]
    memory += [(int(80 * GIB * p / 100), 80 * GIB) for p in (1, 12.5, 30, 50, 100)]
    sms: list[float | str] = [NO_GPM, GPM_WITHOUT_SM, 0.0, 0.5, 0.75, 9.99, 10.0, 10.01, 99.0, 100.0]
    cases = list(itertools.product(utils, memory, (True, False), sms))
    rng = random.Random(23)
    cases += [
        (
            rng.choice([None, rng.randint(0, 100)]),
            (rng.randint(0, 80 * GIB), 80 * GIB),
            rng.random() < 0.9,
            rng.choice([NO_GPM, GPM_WITHOUT_SM, rng.uniform(0, 100)]),
        )
        for _ in range(500)
    ]
    for rule in rules:
        for util, (used, total), healthy, sm in cases:
            g = _gpu(util, used, total, healthy, sm)
            assert _idle_in_summary(g, rule) is gpu_is_idle(g, rule), (rule, util, used, total, healthy, sm)


def test_a_gpu_is_busy_at_exactly_a_threshold_and_idle_just_below() -> None:
    rule = IdleRule(30.0, 50.0)
    assert not gpu_is_idle(_gpu(30, 0, 100, True), rule) and gpu_is_idle(_gpu(29, 0, 100, True), rule)
    assert not gpu_is_idle(_gpu(0, 50, 100, True), rule) and gpu_is_idle(_gpu(0, 49, 100, True), rule)
    assert not gpu_is_idle(_gpu(0, 0, 100, False), rule)  # unhealthy is never idle
    assert gpu_is_idle(_gpu(None, None, None, True), rule)  # no reading counts against it


def test_a_mig_instance_is_idle_by_memory_alone() -> None:
    rule = IdleRule(30.0, 50.0)
    inst = pb.MigInstance(uuid="MIG-0", profile="1g.10gb", memory_used_bytes=50, memory_total_bytes=100)
    assert not mig_instance_is_idle(inst, rule)
    inst.memory_used_bytes = 49
    assert mig_instance_is_idle(inst, rule)
    assert mig_instance_is_idle(pb.MigInstance(uuid="MIG-1", profile="1g.10gb"), rule)  # not reported


def test_with_the_sm_rule_a_gpu_reporting_sm_activity_is_judged_by_it_at_exactly_its_bound() -> None:
    rule = IdleRule(30.0, 50.0, 10.0)
    assert not gpu_is_idle(_gpu(0, 0, 100, True, 10.0), rule)  # at the bound: busy
    assert gpu_is_idle(_gpu(0, 0, 100, True, 9.99), rule)  # just below: idle
    # One thread spinning (measured on an H100): utilization 100 %, SM active 0.75 %.
    spinning = _gpu(100, 0, 100, True, 0.75)
    assert gpu_is_idle(spinning, rule)
    assert not gpu_is_idle(spinning, IdleRule(30.0, 50.0, None))  # the utilization rule calls it busy
    assert not gpu_is_idle(_gpu(0, 50, 100, True, 0.0), rule)  # the memory rule still applies
    assert not gpu_is_idle(_gpu(0, 0, 100, False, 0.0), rule)  # unhealthy is never idle


def test_without_sm_activity_the_utilization_rule_decides_even_with_the_sm_rule_on() -> None:
    rule = IdleRule(30.0, 50.0, 10.0)
    for sm in (NO_GPM, GPM_WITHOUT_SM):  # GPM not supported; supported but SM activity not given
        assert not gpu_is_idle(_gpu(30, 0, 100, True, sm), rule), sm
        assert gpu_is_idle(_gpu(29, 0, 100, True, sm), rule), sm
    assert not gpu_is_idle(_gpu(100, 0, 100, True, 99.0), IdleRule(30.0, 50.0, None))  # rule off: SM ignored
    assert gpu_is_idle(_gpu(0, 0, 100, True, 99.0), IdleRule(30.0, 50.0, None))


def test_a_mig_instance_with_the_sm_rule_is_busy_at_its_bound() -> None:
    rule = IdleRule(30.0, 50.0, 10.0)
    inst = pb.MigInstance(uuid="MIG-0", profile="1g.10gb", memory_used_bytes=0, memory_total_bytes=100)
    inst.gpm.sm_active_percent = 10.0
    assert not mig_instance_is_idle(inst, rule)
    inst.gpm.sm_active_percent = 9.99
    assert mig_instance_is_idle(inst, rule)
    inst.gpm.sm_active_percent = 99.0
    assert mig_instance_is_idle(inst, IdleRule(30.0, 50.0, None))  # rule off: memory alone
    inst.memory_used_bytes = 50
    assert not mig_instance_is_idle(inst, rule)
