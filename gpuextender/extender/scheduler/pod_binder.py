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

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s

from gpuextender.extender.scheduler.wire import BindingArgs

DEFAULT_TIMEOUT_S = 1.5  # the shipped scheduler config's httpTimeout is 2 s


class PodBinder:
    def __init__(
        self,
        connection: k8s.Configuration | Callable[[], k8s.ApiClient],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(connection, k8s.Configuration):
            configuration = connection
            self._factory: Callable[[], k8s.ApiClient] = lambda: k8s.ApiClient(configuration)
        else:
            self._factory = connection
        self._client: k8s.ApiClient | None = None
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
            # _preload_content=False: the raw response (the generated V1Binding model refuses the
            # answer's null target when it deserialises it).
            resp: aiohttp.ClientResponse = await k8s.CoreV1Api(self._client).create_namespaced_pod_binding(  # type: ignore[assignment]
                b.pod_name,
                b.namespace,
                body,  # type: ignore[arg-type]  # a plain dict serialises the same
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=self._timeout_s),
            )
            try:
                raw = await resp.read()
            finally:
                resp.release()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return f"cannot reach the API server to bind {b.key} to {b.node}: {type(exc).__name__}: {exc}"
        if resp.status in (200, 201):
            return ""
        try:
            status = orjson.loads(raw)
        except orjson.JSONDecodeError:
            status = None
        message = status.get("message") if isinstance(status, dict) else None
        return f"binding {b.key} to {b.node}: HTTP {resp.status}: {message or raw[:200].decode('utf-8', 'replace')}"

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
