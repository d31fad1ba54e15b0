"""Fake-GPU scenarios: a YAML file describing simulated GPUs for `gpu-agent --fake`.

The format, for the people who write scenarios, is in docs/scenarios.md:
GPUs with their readings as numbers or patterns over time (sine, steps, ramp), NVML errors to
inject, NVML events to deliver, and the topology. This module parses it and answers pynvml's
questions from it; a running agent follows edits to the file (same number of GPUs).

Like the real driver, events are only delivered to a GPU registered for their type; unlike it,
an event scheduled before the agent registered is still delivered (so `at_s: 0` is seen).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pynvml
import yaml

from gpuextender.agent.sources.nvml_errors import known_error_names

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


# Values from nvml.h, not pynvml names: older nvidia-ml-py releases (our floor is 12.535) lack some.
CLOCK_EVENT_REASONS: dict[str, int] = {  # nvmlClocksEventReason*
    "gpu_idle": 0x01,
    "applications_clocks": 0x02,
    "sw_power_cap": 0x04,
    "hw_slowdown": 0x08,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "power_brake": 0x80,
    "display_clock": 0x100,
}
PCIE_RELATIONS: dict[str, int] = {
    "internal": pynvml.NVML_TOPOLOGY_INTERNAL,
    "single": pynvml.NVML_TOPOLOGY_SINGLE,
    "multiple": pynvml.NVML_TOPOLOGY_MULTIPLE,
    "hostbridge": pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    "node": pynvml.NVML_TOPOLOGY_NODE,
    "system": pynvml.NVML_TOPOLOGY_SYSTEM,
}
EVENT_TYPES: dict[str, int] = {  # nvmlEventType*
    "xid": 0x0008,
    "dbe": 0x0002,
    "sbe": 0x0001,
    "gpu_unavailable": 0x4000,
    "recovery_action": 0x8000,
}
RECOVERY_ACTIONS: dict[str, int] = {  # nvmlDeviceGpuRecoveryAction_t
    "none": 0,
    "gpu_reset": 1,
    "node_reboot": 2,
    "drain_p2p": 3,
    "drain_and_reset": 4,
}
MAX_MIG_DEVICES = 7  # A100/H100: 7 GPU instance slices
_MIG_PROFILE = re.compile(r"^(?:(?P<c>[1-8])c\.)?(?P<g>[1-8])g\.(?P<gb>[0-9]{1,4})gb(?:\+me)?$")


@dataclass(frozen=True, slots=True)
class FakeEcc:
    uncorrected: Pattern  # volatile totals
    corrected: Pattern


@dataclass(frozen=True, slots=True)
class FakeRemappedRows:
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@dataclass(frozen=True, slots=True)
class FakeMig:
    """One MIG device (a GPU instance with one compute instance)."""

    profile: str  # e.g. "1g.10gb"
    gpu_slices: int
    compute_slices: int
    memory_bytes: int
    memory_used_percent: Pattern


@dataclass(frozen=True, slots=True)
class FakeGpm:
    """GPM counters of a GPU that supports GPM (percent over time; NVML_GPM_METRIC_*)."""

    sm_active: Pattern
    sm_occupancy: Pattern
    tensor_active: Pattern
    dram_active: Pattern
    graphics_active: Pattern


GPM_FIELDS = tuple(f.name for f in fields(FakeGpm))  # the scenario's keys under `gpm:`


@dataclass(frozen=True, slots=True)
class FakeGpu:
    product: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    utilization_percent: Pattern
    memory_used_percent: Pattern
    temperature_c: Pattern
    power_watts: Pattern
    # 0.2 readings: None = the GPU does not support it (NVML_ERROR_NOT_SUPPORTED)
    ecc: FakeEcc | None = None
    remapped_rows: FakeRemappedRows | None = None
    retired_pages_pending: bool | None = None
    clock_event_reasons: int | None = None
    sm_clock_mhz: Pattern | None = None
    memory_clock_mhz: Pattern | None = None
    energy_start_mj: float | None = None
    numa_node: int | None = None
    events_supported: bool = True
    mig: tuple[FakeMig, ...] | None = None  # None: MIG not supported; (): enabled, no devices
    # GPM: None = not supported (always so below compute capability 9.0, as on real GPUs)
    gpm: FakeGpm | None = None
    memory_temperature_c: Pattern | None = None
    pcie_replays: int | None = None
    encoder_utilization_percent: Pattern | None = None
    decoder_utilization_percent: Pattern | None = None
    nvlink_data_kib_per_s: Pattern | None = None  # sent + received over all its NVLinks
    pcie_tx_bytes_per_s: Pattern | None = None  # NVML's PCIe byte counters grow at these rates
    pcie_rx_bytes_per_s: Pattern | None = None


@dataclass(frozen=True, slots=True)
class FakeEvent:
    at_s: float
    gpu: int
    kind: str  # a key of EVENT_TYPES
    event_type: int  # nvmlEventType* bit
    data: int  # the XID, the recovery action, or 0


@dataclass(frozen=True, slots=True)
class FakeTopology:
    default_pcie: int  # nvmlGpuTopologyLevel_t
    pcie: dict[tuple[int, int], int]  # (a, b), a < b -> level, overriding default_pcie
    nvlinks: dict[tuple[int, int], int]  # (a, b), a < b -> direct links
    nvswitch_links: int  # links from every GPU into one NVSwitch fabric; 0 = none

    def pcie_level(self, a: int, b: int) -> int:
        return self.pcie.get((min(a, b), max(a, b)), self.default_pcie)


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
    events: tuple[FakeEvent, ...] = ()
    topology: FakeTopology | None = None


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
    ctx.reject_unknown("", document, {"gpus", "errors", "driver_version", "events", "topology"})
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
    events_doc = document.get("events") or []
    if not isinstance(events_doc, list):
        raise ctx.error("events", "must be a list")
    events = tuple(ev for i, e in enumerate(events_doc) for ev in _parse_event(ctx, f"events[{i}]", e, len(gpus)))
    topology = None
    if document.get("topology") is not None:
        topology = _parse_topology(ctx, "topology", document["topology"], len(gpus))
    return Scenario(
        gpus=tuple(gpus), errors=errors, driver_version=driver, source=source, events=events, topology=topology
    )


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

    def integer(self, where: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.error(where, f"must be an integer in {low}..{high}, got {value!r}")
        return value

    def boolean(self, where: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.error(where, f"must be true or false, got {value!r}")
        return value

    def mapping(self, where: str, value: Any, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(where, "must be a mapping")
        self.reject_unknown(where, value, allowed)
        return value

    def gpu_list(self, where: str, value: Any, gpu_count: int, *, min_len: int = 1) -> list[int]:
        if (
            not isinstance(value, list)
            or len(value) < min_len
            or not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < gpu_count for g in value)
        ):
            raise self.error(where, f"must be a list of at least {min_len} GPU index(es) in 0..{gpu_count - 1}")
        return value


_GPU_FIELDS = {
    "count",
    "product",
    "memory_gib",
    "compute_capability",
    "utilization_percent",
    "memory_used_percent",
    "temperature_c",
    "power_watts",
    "ecc",
    "remapped_rows",
    "retired_pages_pending",
    "clock_event_reasons",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "energy_start_mj",
    "numa_node",
    "events_supported",
    "mig",
    "gpm",
    "memory_temperature_c",
    "pcie_replays",
    "encoder_utilization_percent",
    "decoder_utilization_percent",
    "nvlink_data_kib_per_s",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
}
_MAX_COUNTER = 1e12


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
        utilization_percent=_parse_pattern(
            ctx, f"{where}.utilization_percent", group.get("utilization_percent", 0), 0, 100
        ),
        memory_used_percent=_parse_pattern(
            ctx, f"{where}.memory_used_percent", group.get("memory_used_percent", 0), 0, 100
        ),
        temperature_c=_parse_pattern(ctx, f"{where}.temperature_c", group.get("temperature_c", 35), 0, 150),
        power_watts=_parse_pattern(ctx, f"{where}.power_watts", group.get("power_watts", 70), 0, 2000),
        **_parse_gpu_health(ctx, where, group, int(memory_gib * 1024**3)),
    )
    return count, gpu


def _parse_gpu_health(ctx: _Context, where: str, group: dict[str, Any], memory_bytes: int) -> dict[str, Any]:
    """The optional 0.2 fields of a GPU group, as FakeGpu keyword arguments (absent: unsupported)."""
    out: dict[str, Any] = {}
    if "ecc" in group:
        ecc = ctx.mapping(f"{where}.ecc", group["ecc"], {"uncorrected", "corrected"})
        out["ecc"] = FakeEcc(
            _parse_pattern(ctx, f"{where}.ecc.uncorrected", ecc.get("uncorrected", 0), 0, _MAX_COUNTER),
            _parse_pattern(ctx, f"{where}.ecc.corrected", ecc.get("corrected", 0), 0, _MAX_COUNTER),
        )
    if "remapped_rows" in group:
        w = f"{where}.remapped_rows"
        rows = ctx.mapping(w, group["remapped_rows"], {"correctable", "uncorrectable", "pending", "failure"})
        out["remapped_rows"] = FakeRemappedRows(
            ctx.integer(f"{w}.correctable", rows.get("correctable", 0), 0, 100_000),
            ctx.integer(f"{w}.uncorrectable", rows.get("uncorrectable", 0), 0, 100_000),
            ctx.boolean(f"{w}.pending", rows.get("pending", False)),
            ctx.boolean(f"{w}.failure", rows.get("failure", False)),
        )
    if "retired_pages_pending" in group:
        out["retired_pages_pending"] = ctx.boolean(f"{where}.retired_pages_pending", group["retired_pages_pending"])
    if "clock_event_reasons" in group:
        names = group["clock_event_reasons"]
        if not isinstance(names, list) or not all(n in CLOCK_EVENT_REASONS for n in names):
            raise ctx.error(
                f"{where}.clock_event_reasons",
                f"must be a list of names from {sorted(CLOCK_EVENT_REASONS)}, got {names!r}",
            )
        mask = 0
        for name in names:
            mask |= CLOCK_EVENT_REASONS[name]
        out["clock_event_reasons"] = mask
    for key in ("sm_clock_mhz", "memory_clock_mhz"):
        if key in group:
            out[key] = _parse_pattern(ctx, f"{where}.{key}", group[key], 0, 10_000)
    if "energy_start_mj" in group:
        out["energy_start_mj"] = ctx.number(f"{where}.energy_start_mj", group["energy_start_mj"], low=0, high=1e18)
    if "numa_node" in group:
        out["numa_node"] = ctx.integer(f"{where}.numa_node", group["numa_node"], 0, 63)
    if "events_supported" in group:
        out["events_supported"] = ctx.boolean(f"{where}.events_supported", group["events_supported"])
    if "mig" in group:
        out["mig"] = _parse_mig(ctx, f"{where}.mig", group["mig"], memory_bytes)
    if "gpm" in group:
        gpm = ctx.mapping(f"{where}.gpm", group["gpm"] or {}, set(GPM_FIELDS))
        patterns = {k: _parse_pattern(ctx, f"{where}.gpm.{k}", gpm.get(k, 0), 0, 100) for k in GPM_FIELDS}
        out["gpm"] = FakeGpm(**patterns)
    if "memory_temperature_c" in group:
        out["memory_temperature_c"] = _parse_pattern(
            ctx, f"{where}.memory_temperature_c", group["memory_temperature_c"], 0, 150
        )
    if "pcie_replays" in group:
        out["pcie_replays"] = ctx.integer(f"{where}.pcie_replays", group["pcie_replays"], 0, 2**32 - 1)
    for key in ("encoder_utilization_percent", "decoder_utilization_percent"):
        if key in group:
            out[key] = _parse_pattern(ctx, f"{where}.{key}", group[key], 0, 100)
    if "nvlink_data_kib_per_s" in group:
        out["nvlink_data_kib_per_s"] = _parse_pattern(
            ctx, f"{where}.nvlink_data_kib_per_s", group["nvlink_data_kib_per_s"], 0, 1e9
        )
    for key in ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"):  # PCIe 6 x16 moves ~128 GB/s a way
        if key in group:
            out[key] = _parse_pattern(ctx, f"{where}.{key}", group[key], 0, 1e12)
    return out


def _parse_mig(ctx: _Context, where: str, value: Any, gpu_memory_bytes: int) -> tuple[FakeMig, ...]:
    if not isinstance(value, list):
        raise ctx.error(where, "must be a list of MIG devices ([] = MIG enabled, none created)")
    devices: list[FakeMig] = []
    for i, entry in enumerate(value):
        w = f"{where}[{i}]"
        entry = ctx.mapping(w, entry, {"profile", "count", "memory_used_percent"})
        profile = entry.get("profile")
        match = _MIG_PROFILE.match(profile) if isinstance(profile, str) else None
        if match is None or not isinstance(profile, str):
            raise ctx.error(f"{w}.profile", f"must look like '1g.10gb', '1c.2g.20gb' or '1g.10gb+me', got {profile!r}")
        g = int(match["g"])
        memory = int(match["gb"]) * 1024**3
        if memory > gpu_memory_bytes:
            raise ctx.error(f"{w}.profile", f"{profile} has more memory than the GPU")
        count = ctx.integer(f"{w}.count", entry.get("count", 1), 1, MAX_MIG_DEVICES)
        used = _parse_pattern(ctx, f"{w}.memory_used_percent", entry.get("memory_used_percent", 0), 0, 100)
        devices.extend([FakeMig(profile, g, int(match["c"] or g), memory, used)] * count)
    if len(devices) > MAX_MIG_DEVICES:
        raise ctx.error(where, f"{len(devices)} MIG devices; a GPU has at most {MAX_MIG_DEVICES}")
    return tuple(devices)


def _parse_event(ctx: _Context, where: str, entry: Any, gpu_count: int) -> list[FakeEvent]:
    entry = ctx.mapping(where, entry, {"at_s", "gpus", "xid", "type", "action"})
    kind = entry.get("type", "xid")
    if kind not in EVENT_TYPES:
        raise ctx.error(f"{where}.type", f"must be one of {sorted(EVENT_TYPES)}, got {kind!r}")
    data = 0
    if kind == "xid":
        data = ctx.integer(f"{where}.xid", entry.get("xid"), 1, 65535)
    elif "xid" in entry:
        raise ctx.error(f"{where}.xid", f"only for type xid, not {kind}")
    if kind == "recovery_action":
        action = entry.get("action")
        if action not in RECOVERY_ACTIONS:
            raise ctx.error(f"{where}.action", f"must be one of {sorted(RECOVERY_ACTIONS)}, got {action!r}")
        data = RECOVERY_ACTIONS[action]
    elif "action" in entry:
        raise ctx.error(f"{where}.action", f"only for type recovery_action, not {kind}")
    at_s = ctx.number(f"{where}.at_s", entry.get("at_s", 0), low=0)
    gpus = ctx.gpu_list(f"{where}.gpus", entry.get("gpus"), gpu_count)
    return [FakeEvent(at_s, g, kind, EVENT_TYPES[kind], data) for g in gpus]


def _parse_topology(ctx: _Context, where: str, value: Any, gpu_count: int) -> FakeTopology:
    doc = ctx.mapping(where, value, {"pcie", "pcie_groups", "nvlinks", "nvswitch_links"})

    def relation(w: str, name: Any) -> int:
        if name not in PCIE_RELATIONS:
            raise ctx.error(w, f"must be one of {list(PCIE_RELATIONS)}, got {name!r}")
        return PCIE_RELATIONS[name]

    default = relation(f"{where}.pcie", doc.get("pcie", "system"))
    pcie: dict[tuple[int, int], int] = {}
    groups = doc.get("pcie_groups") or []
    if not isinstance(groups, list):
        raise ctx.error(f"{where}.pcie_groups", "must be a list")
    for i, group in enumerate(groups):
        w = f"{where}.pcie_groups[{i}]"
        group = ctx.mapping(w, group, {"gpus", "relation"})
        members = sorted(set(ctx.gpu_list(f"{w}.gpus", group.get("gpus"), gpu_count, min_len=2)))
        level = relation(f"{w}.relation", group.get("relation"))
        for x, a in enumerate(members):
            for b in members[x + 1 :]:
                pcie[(a, b)] = level
    nvlinks: dict[tuple[int, int], int] = {}
    links_doc = doc.get("nvlinks") or []
    if not isinstance(links_doc, list):
        raise ctx.error(f"{where}.nvlinks", "must be a list")
    for i, entry in enumerate(links_doc):
        w = f"{where}.nvlinks[{i}]"
        entry = ctx.mapping(w, entry, {"gpus", "links"})
        pair = ctx.gpu_list(f"{w}.gpus", entry.get("gpus"), gpu_count, min_len=2)
        if len(pair) != 2 or pair[0] == pair[1]:
            raise ctx.error(f"{w}.gpus", f"must name two different GPUs, got {pair!r}")
        key = (min(pair), max(pair))
        nvlinks[key] = nvlinks.get(key, 0) + ctx.integer(f"{w}.links", entry.get("links"), 1, 18)
    switch = ctx.integer(f"{where}.nvswitch_links", doc.get("nvswitch_links", 0), 0, 18)
    for g in range(gpu_count):
        direct = sum(n for pair, n in nvlinks.items() if g in pair)
        if direct + switch > pynvml.NVML_NVLINK_MAX_LINKS:
            raise ctx.error(
                where, f"GPU {g} has {direct + switch} NVLinks; NVML has at most {pynvml.NVML_NVLINK_MAX_LINKS}"
            )
    return FakeTopology(default, pcie, nvlinks, switch)


def _parse_pattern(ctx: _Context, where: str, value: Any, low: float, high: float) -> Pattern:
    if not isinstance(value, dict):
        return Pattern("constant", (ctx.number(where, value, low=low, high=high),))
    kind = value.get("pattern")
    if kind == "sine":
        ctx.reject_unknown(where, value, {"pattern", "min", "max", "period_s"})
        return Pattern(
            "sine",
            (
                ctx.number(f"{where}.min", value.get("min"), low=low, high=high),
                ctx.number(f"{where}.max", value.get("max"), low=low, high=high),
                ctx.number(f"{where}.period_s", value.get("period_s"), low=0.001),
            ),
        )
    if kind == "steps":
        ctx.reject_unknown(where, value, {"pattern", "values", "every_s"})
        values = value.get("values")
        if not isinstance(values, list) or not values:
            raise ctx.error(f"{where}.values", "must be a non-empty list of numbers")
        steps = tuple(ctx.number(f"{where}.values[{i}]", v, low=low, high=high) for i, v in enumerate(values))
        return Pattern("steps", (ctx.number(f"{where}.every_s", value.get("every_s"), low=0.001),), steps)
    if kind == "ramp":
        ctx.reject_unknown(where, value, {"pattern", "from", "to", "over_s"})
        return Pattern(
            "ramp",
            (
                ctx.number(f"{where}.from", value.get("from"), low=low, high=high),
                ctx.number(f"{where}.to", value.get("to"), low=low, high=high),
                ctx.number(f"{where}.over_s", value.get("over_s"), low=0.001),
            ),
        )
    raise ctx.error(f"{where}.pattern", f"must be one of sine, steps, ramp (or give a plain number), got {kind!r}")


def _parse_error(ctx: _Context, where: str, entry: Any, gpu_count: int) -> InjectedError:
    if not isinstance(entry, dict):
        raise ctx.error(where, "must be a mapping")
    ctx.reject_unknown(where, entry, {"call", "error", "gpus", "after_s", "for_s"})
    call = entry.get("call")
    if not isinstance(call, str) or not (call == "*" or call.startswith("nvml")):
        raise ctx.error(
            f"{where}.call", f"must be a pynvml function name like nvmlDeviceGetUtilizationRates or '*', got {call!r}"
        )
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
        self, path: Path, scenario: Scenario, *, check_every_s: float = 0.1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self._scenario = scenario
        self.check_every_s = check_every_s  # one stat; an edit is seen this long after it at most
        self._clock = clock
        self._checked = clock()
        self._seen = self._stamp()
        # The NVML event thread and the sampling thread both call the fake: one reload at a time.
        self._lock = threading.Lock()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def current(self) -> Scenario:
        now = self._clock()
        if now - self._checked < self.check_every_s:
            return self._scenario
        with self._lock:
            return self._reload(now)

    def _reload(self, now: float) -> Scenario:
        if now - self._checked < self.check_every_s:  # another thread checked while this one waited
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
            log.warning(
                "%s: now %d GPUs, was %d: NVML enumerates GPUs once; keeping the last good scenario",
                self.path,
                len(scenario.gpus),
                len(self._scenario.gpus),
            )
            return self._scenario
        log.info("%s changed: simulated GPUs updated", self.path)
        self._scenario = scenario
        return scenario
