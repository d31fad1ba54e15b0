"""The extender's `bind` verb's one side effect: the pod's Binding (the `pods/binding`
subresource), created through the API server as kube-scheduler's DefaultBinder would.

Why the extender binds at all (deploy/README, "Bound pods and the bind verb"): it then learns of
every binding before it answers, in the same process that decides, instead of a watch event
later. The call is bounded (`timeout_s`, under the scheduler's httpTimeout): a bind that times
out is an error to kube-scheduler, which checks the pod's nodeName before retrying it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuextender.extender.kube import api_call
from gpuextender.extender.kube.connection import ApiClient, Connection, client_factory
from gpuextender.extender.scheduler.wire import BindingArgs

DEFAULT_TIMEOUT_S = 1.5  # the shipped scheduler config's httpTimeout is 2 s


class PodBinder:
    def __init__(
        self,
        connection: Connection,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = client_factory(connection)
        self._client: ApiClient | None = None
        self._timeout_s = timeout_s
        self._clock = clock

    async def bind(self, b: BindingArgs) -> str:
        """Create the Binding; "" when it is made, else why not (one line, for ExtenderBindingResult)."""
        if self._client is None:
            self._client = self._factory()
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The UID makes the API server refuse to bind a pod recreated under the same name.
            "metadata": {"name": b.pod_name, "namespace": b.namespace, "uid": b.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": b.node},
        }
        try:
            got = await api_call.answer(
                api_call.create_binding(self._client, b.namespace, b.pod_name, body, self._timeout_s)
            )
        except (*api_call.TRANSPORT_ERRORS, api_call.ApiError) as exc:
            return f"cannot reach the API server to bind {b.key} to {b.node}: {type(exc).__name__}: {exc}"
        if got.status in (200, 201):
            return ""
        return f"binding {b.key} to {b.node}: HTTP {got.status}: {api_call.server_message(got.raw)}"

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
