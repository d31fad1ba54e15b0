"""What replicas tell each other of their open bindings (binding_gate.py), on the wire: one JSON
object per message, POSTed to a peer's PEER_PATH (peer_sender.py sends, http_api.py receives).

    {"from": "<sender's instance id>",
     "open": [{"uid": "...", "need": 2, "nodes": ["n1", "n2"], "gang": "", "holdS": 0.43}]}

`nodes` null: anywhere (the filter passed more than MAX_NODES_PER_ENTRY: every filter of the peer
waits for it, as for a MIG pod's). `holdS`: the seconds the binding stays open from now (clocks
are not compared). The answer is {"from": "<receiver's instance id>"}: a sender that reads its own
id has reached itself (the headless Service lists every replica).

Anyone who reaches the scheduler API may call filter, which opens a binding too; a message opens
bindings of the same kind, many at once (bench/RESULTS.md, "A peer's worst message"). Each field is
bounded and checked; a bad message is refused whole, with why. What all messages hold open at once
is bounded where they are taken (binding_gate.MAX_PEER_OPEN, MAX_PEER_NAMES).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from gpuextender.extender.model.untrusted import InvalidInput, shown

PEER_PATH = "/peers/open-bindings"
MAX_ENTRIES = 1024  # per message: a burst's open bindings between two sends, many times over
MAX_NODES_PER_ENTRY = 1000  # names a filter passed (the shortlist sends 100); beyond: anywhere
MAX_UID_CHARS = 128  # a UID is 36
MAX_NAME_CHARS = 253  # a node name, a DNS subdomain
MAX_GANG_CHARS = 512  # a group key: namespace/source/name
MAX_ID_CHARS = 64  # an instance id (new_instance_id: 32 hex digits)
MAX_NEED = 4096  # GPUs one pod may ask for, far above any node's


def new_instance_id() -> str:
    """A replica's id for its peers, new at each start (a restarted replica is a new peer)."""
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class OpenBinding:
    uid: str
    need: int  # GPUs (0: MIG devices or DRA-only demand: every filter waits for it)
    nodes: frozenset[str] | None  # where filter said it may go; None: anywhere
    gang: str  # its gang's group key, "" for none
    hold_s: float  # open for this long from now


def encode(sender: str, entries: list[OpenBinding]) -> bytes:
    return orjson.dumps(
        {
            "from": sender,
            "open": [
                {
                    "uid": e.uid,
                    "need": e.need,
                    "nodes": sorted(e.nodes) if e.nodes is not None else None,
                    "gang": e.gang,
                    "holdS": round(e.hold_s, 6),
                }
                for e in entries
            ],
        }
    )


def node_set(passed: frozenset[str]) -> frozenset[str] | None:
    """What a message says of a filter's passed nodes: them, or anywhere where they are too many."""
    return passed if len(passed) <= MAX_NODES_PER_ENTRY else None


def _refused(message: str) -> InvalidInput:
    return InvalidInput("invalid_peer_message", message)


def _text(raw: Any, what: str, limit: int, *, empty: bool = False) -> str:
    if not isinstance(raw, str) or len(raw) > limit or (not raw and not empty):
        raise _refused(f"{what}: expected a string of {'0' if empty else '1'} to {limit} characters, got {shown(raw)}")
    return raw


def _names(nodes: list[Any], i: int) -> frozenset[str]:
    """open[i].nodes, each a node name; checked at C speed (a 2 MiB message names ~230,000), and
    one by one only to say which is wrong."""
    if set(map(type, nodes)) <= {str} and all(0 < n <= MAX_NAME_CHARS for n in set(map(len, nodes))):
        return frozenset(nodes)
    return frozenset(_text(n, f"open[{i}].nodes", MAX_NAME_CHARS) for n in nodes)


def parse(body: bytes, max_hold_s: float) -> tuple[str, list[OpenBinding]]:
    """The sender's id and its open bindings, each held at most `max_hold_s` (this replica's own
    --binding-wait: a peer can hold a filter no longer than a binding of its own would)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _refused(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _refused(f"expected an object, got {shown(doc)}")
    sender = _text(doc.get("from"), "from", MAX_ID_CHARS)
    items = doc.get("open")
    if not isinstance(items, list) or len(items) > MAX_ENTRIES:
        raise _refused(f"open: expected a list of at most {MAX_ENTRIES} entries, got {shown(items)}")
    entries = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _refused(f"open[{i}]: expected an object, got {shown(item)}")
        need, hold, nodes = item.get("need"), item.get("holdS"), item.get("nodes")
        if not isinstance(need, int) or isinstance(need, bool) or not 0 <= need <= MAX_NEED:
            raise _refused(f"open[{i}].need: expected an integer within [0, {MAX_NEED}], got {shown(need)}")
        if not isinstance(hold, int | float) or isinstance(hold, bool) or not math.isfinite(hold) or hold < 0:
            raise _refused(f"open[{i}].holdS: expected seconds >= 0, got {shown(hold)}")
        if nodes is not None and (not isinstance(nodes, list) or len(nodes) > MAX_NODES_PER_ENTRY):
            raise _refused(f"open[{i}].nodes: expected null or a list of at most {MAX_NODES_PER_ENTRY} names")
        entries.append(
            OpenBinding(
                _text(item.get("uid"), f"open[{i}].uid", MAX_UID_CHARS),
                need,
                None if nodes is None else _names(nodes, i),
                _text(item.get("gang", ""), f"open[{i}].gang", MAX_GANG_CHARS, empty=True),
                min(float(hold), max_hold_s),
            )
        )
    return sender, entries
