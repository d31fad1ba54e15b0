"""Fake-GPU scenarios: a YAML file describing simulated GPUs for `gpu-agent --fake`.

    driver_version: "550.127.05"          # optional
    gpus:
      - count: 4                          # this many identical GPUs (default 1)
        product: NVIDIA H100 80GB HBM3    # raw NVML name
        memory_gib: 80
        compute_capability: "9.0"
        utilization_percent: 5            # a number, or a pattern (below)
        memory_used_percent: {pattern: steps, values: [10, 70], every_s: 30}
        temperature_c: 35
        power_watts: {pattern: sine, min: 70, max: 650, period_s: 60}
    errors:                               # NVML errors to inject (optional)
      - call: nvmlDeviceGetUtilizationRates   # pynvml function name, or "*" for every call
        error: GpuIsLost                  # any NVMLError_<Name> pynvml defines
        gpus: [2]                         # optional: only these GPU indexes
        after_s: 10                       # optional: from agent start (default 0)
        for_s: 30                         # optional: how long (default: forever)

A running agent follows the file: edit it (same number of GPUs) and the next samples change.

Patterns: a plain number is constant; `{pattern: sine, min, max, period_s}`,
`{pattern: steps, values: [...], every_s}`, `{pattern: ramp, from, to, over_s}`
(ramp holds at `to` afterwards).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuextender.agent.nvml_errors import known_error_names

log = logging.getLogger(__name__)


class ScenarioError(ValueError):
    """The scenario file is not valid; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class Pattern:
    """A number that can change over time (seconds since the fake started)."""

    kind: str
    params: tuple[float, ...]
    values: tuple[float, ...] = ()

    def at(self, t: float) -> float:
        if self.kind == "constant":
            return self.params[0]
        if self.kind == "sine":
            low, high, period = self.params
            return low + (high - low) * (0.5 - 0.5 * math.cos(2 * math.pi * t / period))
        if self.kind == "steps":
            (every,) = self.params
            return self.values[int(t // every) % len(self.values)]
        start, end, over = self.params  # ramp
        return end if t >= over else start + (end - start) * t / over


@dataclass(frozen=True, slots=True)
class FakeGpu:
    product: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    utilization_percent: Pattern
    memory_used_percent: Pattern
    temperature_c: Pattern
    power_watts: Pattern


@dataclass(frozen=True, slots=True)
class InjectedError:
    call: str  # pynvml function name (C suffixes like _v2 are ignored) or "*"
    error: str  # e.g. "GpuIsLost"
    code: int
    gpus: frozenset[int] | None  # None: every GPU (and node-level calls)
    after_s: float = 0.0
    for_s: float | None = None

    def active(self, t: float) -> bool:
        return t >= self.after_s and (self.for_s is None or t < self.after_s + self.for_s)


@dataclass(frozen=True, slots=True)
class Scenario:
    gpus: tuple[FakeGpu, ...]
    errors: tuple[InjectedError, ...] = ()
    driver_version: str = "550.127.05"
    source: str = field(default="<inline>", compare=False)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    return parse_scenario(document, source=str(path))


def parse_scenario(document: Any, *, source: str = "<inline>") -> Scenario:
    ctx = _Context(source)
    if not isinstance(document, dict):
        raise ctx.error("", "the top level must be a mapping with a `gpus` list")
    ctx.reject_unknown("", document, {"gpus", "errors", "driver_version"})
    groups = document.get("gpus")
    if not isinstance(groups, list) or not groups:
        raise ctx.error("gpus", "must be a non-empty list")
    gpus: list[FakeGpu] = []
    for i, group in enumerate(groups):
        count, gpu = _parse_gpu_group(ctx, f"gpus[{i}]", group)
        gpus.extend([gpu] * count)
    errors_doc = document.get("errors") or []
    if not isinstance(errors_doc, list):
        raise ctx.error("errors", "must be a list")
    errors = tuple(_parse_error(ctx, f"errors[{i}]", e, len(gpus)) for i, e in enumerate(errors_doc))
    driver = document.get("driver_version", "550.127.05")
    if not isinstance(driver, str) or not driver:
        raise ctx.error("driver_version", "must be a non-empty string")
    return Scenario(gpus=tuple(gpus), errors=errors, driver_version=driver, source=source)


class _Context:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, where: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: {where + ': ' if where else ''}{message}")

    def reject_unknown(self, where: str, mapping: dict[str, Any], allowed: set[str]) -> None:
        unknown = sorted(set(mapping) - allowed)
        if unknown:
            raise self.error(where, f"unknown field(s) {unknown}; allowed: {sorted(allowed)}")

    def number(self, where: str, value: Any, *, low: float | None = None, high: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(where, f"must be a number, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.error(where, f"{value} is outside {low}..{high}")
        return float(value)


_GPU_FIELDS = {
    "count", "product", "memory_gib", "compute_capability",
    "utilization_percent", "memory_used_percent", "temperature_c", "power_watts",
}  # fmt: skip


def _parse_gpu_group(ctx: _Context, where: str, group: Any) -> tuple[int, FakeGpu]:
    if not isinstance(group, dict):
        raise ctx.error(where, "must be a mapping")
    ctx.reject_unknown(where, group, _GPU_FIELDS)
    count = group.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
        raise ctx.error(f"{where}.count", f"must be an integer in 1..64, got {count!r}")
    product = group.get("product")
    if not isinstance(product, str) or not product.strip():
        raise ctx.error(f"{where}.product", "must be the NVML product name, e.g. 'NVIDIA H100 80GB HBM3'")
    memory_gib = ctx.number(f"{where}.memory_gib", group.get("memory_gib"), low=1, high=4096)
    cc_text = str(group.get("compute_capability", "9.0"))
    major, dot, minor = cc_text.partition(".")
    if not (major.isdigit() and dot and minor.isdigit()):
        raise ctx.error(f"{where}.compute_capability", f"must look like '9.0', got {cc_text!r}")
    gpu = FakeGpu(
        product=product.strip(),
        memory_bytes=int(memory_gib * 1024**3),
        compute_capability=(int(major), int(minor)),
        utilization_percent=_parse_pattern(ctx, f"{where}.utilization_percent", group.get("utilization_percent", 0), 0, 100),
        memory_used_percent=_parse_pattern(ctx, f"{where}.memory_used_percent", group.get("memory_used_percent", 0), 0, 100),
        temperature_c=_parse_pattern(ctx, f"{where}.temperature_c", group.get("temperature_c", 35), 0, 150),
        power_watts=_parse_pattern(ctx, f"{where}.power_watts", group.get("power_watts", 70), 0, 2000),
    )  # fmt: skip
    return count, gpu


def _parse_pattern(ctx: _Context, where: str, value: Any, low: float, high: float) -> Pattern:
    if not isinstance(value, dict):
        return Pattern("constant", (ctx.number(where, value, low=low, high=high),))
    kind = value.get("pattern")
    if kind == "sine":
        ctx.reject_unknown(where, value, {"pattern", "min", "max", "period_s"})
        return Pattern("sine", (
            ctx.number(f"{where}.min", value.get("min"), low=low, high=high),
            ctx.number(f"{where}.max", value.get("max"), low=low, high=high),
            ctx.number(f"{where}.period_s", value.get("period_s"), low=0.001),
        ))  # fmt: skip
    if kind == "steps":
        ctx.reject_unknown(where, value, {"pattern", "values", "every_s"})
        values = value.get("values")
        if not isinstance(values, list) or not values:
            raise ctx.error(f"{where}.values", "must be a non-empty list of numbers")
        steps = tuple(ctx.number(f"{where}.values[{i}]", v, low=low, high=high) for i, v in enumerate(values))
        return Pattern("steps", (ctx.number(f"{where}.every_s", value.get("every_s"), low=0.001),), steps)
    if kind == "ramp":
        ctx.reject_unknown(where, value, {"pattern", "from", "to", "over_s"})
        return Pattern("ramp", (
            ctx.number(f"{where}.from", value.get("from"), low=low, high=high),
            ctx.number(f"{where}.to", value.get("to"), low=low, high=high),
            ctx.number(f"{where}.over_s", value.get("over_s"), low=0.001),
        ))  # fmt: skip
    raise ctx.error(f"{where}.pattern", f"must be one of sine, steps, ramp (or give a plain number), got {kind!r}")


def _parse_error(ctx: _Context, where: str, entry: Any, gpu_count: int) -> InjectedError:
    if not isinstance(entry, dict):
        raise ctx.error(where, "must be a mapping")
    ctx.reject_unknown(where, entry, {"call", "error", "gpus", "after_s", "for_s"})
    call = entry.get("call")
    if not isinstance(call, str) or not (call == "*" or call.startswith("nvml")):
        raise ctx.error(f"{where}.call", f"must be a pynvml function name like nvmlDeviceGetUtilizationRates or '*', got {call!r}")
    names = known_error_names()
    error = entry.get("error")
    if error not in names:
        raise ctx.error(f"{where}.error", f"unknown NVML error {error!r}; known: {', '.join(sorted(names))}")
    gpus = entry.get("gpus")
    if gpus is not None:
        if not isinstance(gpus, list) or not all(isinstance(g, int) and 0 <= g < gpu_count for g in gpus):
            raise ctx.error(f"{where}.gpus", f"must be a list of GPU indexes in 0..{gpu_count - 1}")
        gpus = frozenset(gpus)
    for_s = entry.get("for_s")
    return InjectedError(
        call=call,
        error=error,
        code=names[error],
        gpus=gpus,
        after_s=ctx.number(f"{where}.after_s", entry.get("after_s", 0), low=0),
        for_s=None if for_s is None else ctx.number(f"{where}.for_s", for_s, low=0),
    )


class ScenarioFile:
    """A scenario file followed while the agent runs: editing it changes the simulated GPUs, as a
    workload starting or stopping would on a real node. Checked at most every `check_every_s`
    (one stat). A file that does not parse (half-written, or wrong) or that changes the number of
    GPUs (NVML enumerates devices once, at init) is logged and ignored: the last good scenario stays."""

    def __init__(
        self, path: Path, scenario: Scenario, *, check_every_s: float = 0.5, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self._scenario = scenario
        self._every = check_every_s
        self._clock = clock
        self._checked = clock()
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def current(self) -> Scenario:
        now = self._clock()
        if now - self._checked < self._every:
            return self._scenario
        self._checked = now
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return self._scenario
        self._seen = stamp
        try:
            scenario = load_scenario(self.path)
        except ScenarioError as exc:
            log.warning("%s; keeping the last good scenario", exc)
            return self._scenario
        if len(scenario.gpus) != len(self._scenario.gpus):
            log.warning("%s: now %d GPUs, was %d: NVML enumerates GPUs once; keeping the last good scenario",
                        self.path, len(scenario.gpus), len(self._scenario.gpus))  # fmt: skip
            return self._scenario
        log.info("%s changed: simulated GPUs updated", self.path)
        self._scenario = scenario
        return scenario
