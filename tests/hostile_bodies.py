"""Scheduler request bodies at the extender's limits, and a seeded mutator of real ones.

Shared by tests/e2e/test_hostile_http.py (the real server must answer each one with
200 or 4xx) and bench/bench_hostile_http.py (how long each one holds the event loop).
Every body is built from the captured kube-scheduler requests in
tests/fixtures/extender-requests/.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from typing import Any

from gpuextender.extender.model.pod_gpus import MAX_CONTAINERS
from tests.harness import REQUESTS

FIXTURE_NAMES = sorted(p.name for p in REQUESTS.glob("*request*.json"))


def fixture(name: str) -> dict[str, Any]:
    return json.loads((REQUESTS / name).read_bytes())


def compact(document: Any) -> bytes:
    """Go's encoding/json output: no spaces (what kube-scheduler sends)."""
    return json.dumps(document, separators=(",", ":")).encode()


def names_request(names: list[str], pod: dict[str, Any] | None = None) -> dict[str, Any]:
    args = fixture("filter-request-nodecache-true.json")
    if pod is not None:
        args["Pod"] = pod
    args["NodeNames"] = names
    return args


def unknown_names(count: int) -> list[str]:
    """Names no agent reports: the dearest case for every verb (~20 B each, like real names)."""
    return [f"hostile-node-{i:06d}" for i in range(count)]


def full_nodes_request(count: int) -> dict[str, Any]:
    """Full-Node mode (nodeCacheCapable: false) with `count` clones of the captured Node."""
    args = fixture("filter-request-nodecache-false.json")
    template = args["Nodes"]["items"][0]
    items = []
    for i in range(count):
        node = copy.deepcopy(template)
        node["metadata"]["name"] = f"full-node-{i:05d}"
        items.append(node)
    args["Nodes"]["items"] = items
    return args


def pad_to(args: dict[str, Any], size: int, unit: str) -> bytes:
    """`args` with Pod.metadata.annotations["pad"] = a JSON array of `unit` filling the body to
    `size` bytes or just under it (unit is raw JSON such as `[]`, `0`, `"ab"`)."""
    args = copy.deepcopy(args)
    args["Pod"].setdefault("metadata", {}).setdefault("annotations", {})["pad"] = []
    base = len(compact(args))
    room = size - base
    count = max(0, room // (len(unit) + 1))
    blob = "[" + ",".join([unit] * count) + "]"
    raw = compact(args).replace(b'"pad":[]', b'"pad":' + blob.encode(), 1)
    assert len(raw) <= size, (len(raw), size)
    return raw


def worst_bodies(max_body_bytes: int, max_candidates: int, max_json_containers: int) -> dict[str, bytes]:
    """The dearest bodies the limits let through (or refuse at the last step), by name.
    `max_json_containers`: JSON objects + arrays allowed (wire.BYTES_PER_CONTAINER)."""
    near = max_body_bytes - 64
    many = names_request(unknown_names(max_candidates))
    gpu_containers = fixture("filter-request-nodecache-true.json")["Pod"]
    container = gpu_containers["spec"]["containers"][0]
    gpu_containers["spec"]["containers"] = [copy.deepcopy(container) for _ in range(MAX_CONTAINERS)]
    node_size = len(compact(full_nodes_request(1)["Nodes"]["items"][0])) + 1
    full = full_nodes_request(max(1, (near - 4096) // node_size))
    # As many containers ('{' and '[') as allowed: the rest of the body in cheap strings.
    dense = names_request(unknown_names(max_candidates))
    dense["Pod"]["metadata"]["annotations"] = {"lists": [[] for _ in range(max_json_containers - 200)]}
    return {
        "names at --max-candidates": compact(many),
        "names, one more than --max-candidates": compact(names_request(unknown_names(max_candidates + 1))),
        "names padded to the limit with short strings": pad_to(many, near, '"ab"'),
        "names padded to the limit with zeros": pad_to(many, near, "0"),
        "empty arrays to the limit (refused: too_complex)": pad_to(many, near, "[]"),
        "empty arrays up to the container bound": pad_to(dense, near, '"ab"'),
        "pod with the most containers, each with GPUs": compact(
            names_request(unknown_names(max_candidates), gpu_containers)
        ),
        "full Nodes to the limit": compact(full),
        "names one level below the depth limit": compact(names_request(["n"])).replace(
            b'"Pod":{', b'"Pod":{"deep":' + b"[" * 1020 + b"]" * 1020 + b",", 1
        ),
    }


# -- seeded mutations ---------------------------------------------------------------------

HUGE_VALUES: list[Any] = [
    "1e999999",
    "1e999999Ei",
    "9" * 5000,
    "1" + "0" * 4400,
    2**63 - 1,
    2**64 - 1,
    -(2**63),
    1.7e308,
    "2147483649",
    "-1",
    "0.5",
    "Infinity",
    "NaN",
    "",
    " ",
    "\u0000",
    "\ud7ff" * 3,
    "x" * 100_000,
    None,
    True,
    [],
    {},
    [[[[[]]]]],
    {"a": {"b": {"c": {}}}},
    0,
    1,
    "2Gi",
    "8",
    8,
]


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*path, i))


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


class Mutator:
    """Seeded, repeatable mutations of the captured request bodies: byte edits and JSON
    edits (huge or wrong-typed values, deep nesting, duplicate keys, quantities)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.documents = [fixture(name) for name in FIXTURE_NAMES]
        self.ops: list[Callable[[], bytes]] = [
            self.delete_bytes,
            self.insert_bytes,
            self.flip_bytes,
            self.truncate,
            self.replace_value,
            self.replace_value,
            self.replace_value,
            self.deep_value,
            self.quantity,
            self.quantity,
            self.duplicate_key,
            self.huge_list,
        ]

    def body(self) -> bytes:
        return self.rng.choice(self.ops)()

    def _doc(self) -> Any:
        return copy.deepcopy(self.rng.choice(self.documents))

    def _raw(self) -> bytearray:
        return bytearray(compact(self._doc()))

    def delete_bytes(self) -> bytes:
        raw = self._raw()
        start = self.rng.randrange(len(raw))
        del raw[start : start + self.rng.randint(1, 16)]
        return bytes(raw)

    def insert_bytes(self) -> bytes:
        raw = self._raw()
        at = self.rng.randrange(len(raw))
        alphabet = b'{}[]",:0123456789eE.-+ \\xa\x00\xff'
        raw[at:at] = bytes(self.rng.choice(alphabet) for _ in range(self.rng.randint(1, 8)))
        return bytes(raw)

    def flip_bytes(self) -> bytes:
        raw = self._raw()
        for _ in range(self.rng.randint(1, 4)):
            raw[self.rng.randrange(len(raw))] ^= 1 << self.rng.randrange(8)
        return bytes(raw)

    def truncate(self) -> bytes:
        raw = self._raw()
        return bytes(raw[: self.rng.randrange(len(raw))])

    def replace_value(self) -> bytes:
        doc = self._doc()
        path = self.rng.choice(list(_paths(doc)))
        return compact(_set(doc, path, copy.deepcopy(self.rng.choice(HUGE_VALUES))))

    def deep_value(self) -> bytes:
        """An array nested around orjson's limits (it writes 254 levels, reads 1,024)."""
        doc = self._doc()
        path = self.rng.choice(list(_paths(doc))[1:])
        depth = self.rng.choice([250, 253, 254, 255, 300, 1000, 1030])
        raw = compact(_set(doc, path, "\u2603deep"))  # json's encoder recurses: splice the bytes in
        return raw.replace(b'"\\u2603deep"', b"[" * depth + b"]" * depth, 1)

    def quantity(self) -> bytes:
        doc = self._doc()
        value = self.rng.choice(
            [
                "1e999999",
                "1e999999Ei",
                "2147483648",
                "2147483649",
                "2Gi",
                "3Gi",
                "1e64",
                "1e65",
                "0e65",
                "1" * 65,
                "1" * 64,
                "1e9",
                "2e9",
                "1E",
                "8Ei",
                "7.0",
                "1000m",
                "1e3k",
                "+4",
                "-0",
                ".5",
                "5.",
                2**31,
                2**31 + 1,
                2**62,
            ]
        )
        for path in _paths(doc):
            if path and path[-1] == "nvidia.com/gpu" and self.rng.random() < 0.7:
                _set(doc, path, value)
        return compact(doc)

    def duplicate_key(self) -> bytes:
        raw = compact(self._doc())
        key = self.rng.choice([b'"Pod":', b'"NodeNames":', b'"Nodes":', b'"metadata":', b'"nvidia.com/gpu":'])
        at = raw.find(key)
        if at < 0:
            return raw
        return raw[:at] + key + b"null," + raw[at:] if self.rng.random() < 0.5 else raw.replace(key, key.upper(), 1)

    def huge_list(self) -> bytes:
        doc = self._doc()
        count = self.rng.choice([0, 1, 4999, 5000, 5001, 20000])
        top = "NodeNames" if doc.get("NodeNames") is not None else "Nodes"
        if top == "NodeNames":
            doc["NodeNames"] = [f"n{i}" for i in range(count)]
        else:
            doc["Nodes"]["items"] = [copy.deepcopy(doc["Nodes"]["items"][0]) for _ in range(min(count, 600))]
        return compact(doc)
