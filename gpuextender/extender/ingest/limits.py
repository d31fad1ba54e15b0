"""Bounds on what agent streams may cost the extender: the per-stream report rate
and the set of nodes outside the inventory whose reports are kept."""

from __future__ import annotations

from collections.abc import Callable

from gpuextender.common.token_bucket import TokenBucket

# An agent never samples faster than every 0.1 s (agent.sampling.sample_loop.MIN_INTERVAL_S) and sends only
# its newest report, so a real agent never waits here; a client that writes without reading acks
# gets 10 reports/s processed and HTTP/2 flow control holds the rest on its side.
REPORTS_PER_SECOND = 10.0
REPORT_BURST = 10
# What accepted reports wait, at most, to be sent on together: an ingest worker's frames to the
# extender (workers/frame_loops.py) and a relay's messages to each replica (relay/upstream.py).
# At 5,000 gated agents over 8 workers (~210 reports/s each) a frame then holds ~10 reports where it
# held 2 at 10 ms, and the main process's cost per report halved (bench/RESULTS.md); 50 ms is
# nothing to a 1 s sample.
FLUSH_S = 0.05


class ReportPacer:
    """One stream's pace: `rate` reports a second, up to `burst` at once (common/token_bucket.py)."""

    __slots__ = ("_bucket",)

    def __init__(self, clock: Callable[[], float], rate: float = REPORTS_PER_SECOND, burst: int = REPORT_BURST) -> None:
        self._bucket = TokenBucket(rate, burst, clock)

    def take(self) -> float:
        """Take one report's token: 0.0 when there was one, else the seconds until there is
        one (nothing taken; call again after waiting)."""
        return self._bucket.wait()


# A relay stream's refused reports (empty, not a NodeReport, invalid, over their agent stream's
# pace...) cost the ingest ~7 us each (bench/RESULTS.md, "A relay's worst message"): at most this
# many a second, or its held agent streams' own pace where that is more (what as many agents
# streaming directly could have refused), and this many at once (a relay's agents each refused once
# after a replica restarted). Past that, the stream is read only as its budget refills: HTTP/2 flow
# control holds the relay, and a relay costs no more refused work than the agents it speaks for.
RELAY_REFUSALS_PER_SECOND = 1000.0
RELAY_REFUSAL_BURST = 5000


class RefusalBudget:
    """One relay client's refusals, charged after the fact (common/token_bucket.py): a charge may
    leave a debt, which the client's stream pays by waiting before it is read again."""

    __slots__ = ("_bucket",)

    def __init__(self, clock: Callable[[], float], burst: int = RELAY_REFUSAL_BURST) -> None:
        self._bucket = TokenBucket(RELAY_REFUSALS_PER_SECOND, burst, clock)

    def charge(self, refused: int, rate: float) -> float:
        """`refused` more at `rate` a second (read at each charge: it follows the held streams):
        the seconds to wait before reading on, 0.0 within the budget."""
        return self._bucket.charge(refused, rate)

    def refilled(self) -> bool:
        """Whether it holds its whole burst again at the least rate: worth no more than a new one."""
        return self._bucket.full(RELAY_REFUSALS_PER_SECOND)


# Budgets kept for clients with no stream open (a debt must outlive the stream that ran it up).
# Past this many, those refilled are dropped (a new one is the same), then the oldest: a client
# with fresh addresses faster than debts refill (5 s for a whole burst) is what reaches it.
MAX_IDLE_REFUSAL_BUDGETS = 1024


class RefusalBudgets:
    """Each relay client's RefusalBudget, shared by all its streams: a client is its address (the
    relays' one service account tells no two apart: ingest/service.py), so one that opens stream
    after stream gets no fresh burst on each. Kept while a stream of it is open, and after it
    while it may still be in debt (MAX_IDLE_REFUSAL_BUDGETS)."""

    __slots__ = ("_budgets", "_clock", "_open")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._budgets: dict[str, RefusalBudget] = {}
        self._open: dict[str, int] = {}  # client -> its streams open

    def open(self, client: str) -> RefusalBudget:
        """A stream of `client` opens: its budget (the one its other streams share, or the one
        its closed streams left)."""
        self._open[client] = self._open.get(client, 0) + 1
        budget = self._budgets.get(client)
        if budget is None:
            if len(self._budgets) - (len(self._open) - 1) >= MAX_IDLE_REFUSAL_BUDGETS:
                self._prune()
            budget = self._budgets[client] = RefusalBudget(self._clock)
        return budget

    def close(self, client: str) -> None:
        """A stream of `client` ended (its budget stays: see the class)."""
        left = self._open.get(client, 0) - 1
        if left > 0:
            self._open[client] = left
        else:
            self._open.pop(client, None)

    def __len__(self) -> int:
        return len(self._budgets)

    def _prune(self) -> None:
        idle = [c for c in self._budgets if c not in self._open]
        for client in idle:
            if self._budgets[client].refilled():
                del self._budgets[client]
        idle = [c for c in idle if c in self._budgets]
        for client in idle[: max(0, len(idle) - MAX_IDLE_REFUSAL_BUDGETS + 1)]:  # the oldest first
            del self._budgets[client]


class UnknownNodes:
    """Nodes the inventory does not know whose reports are stored: at most `limit` of them.

    Nothing schedules onto such a node (kube-scheduler only asks about Nodes it has), so
    their data only costs memory: a few are kept (an agent that starts before its Node
    object is listed), and reports for more are refused. A node leaves the set when the
    inventory learns it or the extender forgets its data (--forget-after)."""

    def __init__(self, known: Callable[[str], bool], held: Callable[[str], bool], limit: int) -> None:
        self._known, self._held, self.limit = known, held, limit
        self._nodes: set[str] = set()

    def admit(self, node: str) -> bool:
        """May `node`'s report be stored? Takes a slot for a new unknown node while one is free."""
        if self._known(node):
            self._nodes.discard(node)
            return True
        if node in self._nodes:
            return True
        if len(self._nodes) >= self.limit:
            self._prune()
        if len(self._nodes) >= self.limit:
            return False
        self._nodes.add(node)
        return True

    def count(self) -> int:
        """Unknown nodes whose data is held now."""
        self._prune()
        return len(self._nodes)

    def _prune(self) -> None:
        """Free the slots of nodes that joined the inventory or whose data was forgotten."""
        self._nodes = {n for n in self._nodes if not self._known(n) and self._held(n)}


# -- How large one message may be, end to end (one home for the chain) ---------------------------------
# The largest report gRPC accepts (grpc.max_receive_message_length on the extender). A 256-GPU
# report with every field at report_checks.py's bounds is 150,960 bytes (147.4 KiB; an 8-GPU node sends
# ~2 KB): this leaves ~108 KiB, ~430 bytes per GPU at 256 GPUs. The 0.2 facts (holders, MIG
# instances, topology) are bounded one by one below, but all at their bounds on every GPU they would
# exceed it: this limit is then the one that holds. What real nodes send stays far below it (an
# 8-GPU node with 64 time-slicing holders per GPU, ~70 KB). Anything larger ends the stream with
# RESOURCE_EXHAUSTED before it is parsed.
MAX_REPORT_BYTES = 256 * 1024
# RelayedReport's and RelayBatch's own bytes around a report: field tags, the stream number, the
# lengths (at most 1 + 10 + 1 + 3 + 2 + 1 + 3; rounded up).
WRAP_BYTES = 64
# A relay takes from its agents only reports it can forward whole (relay/relay_app.py) ...
MAX_AGENT_REPORT_BYTES = MAX_REPORT_BYTES - WRAP_BYTES
# ... in batches of at most what the extender's transport takes (relay/upstream.py).
MAX_BATCH_BYTES = MAX_REPORT_BYTES
