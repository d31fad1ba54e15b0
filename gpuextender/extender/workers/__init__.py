"""The ingest workers: processes that take the agents' gRPC streams off the scheduler's loop.

The extender's side, `supervisor.py`: it starts them on the port it holds (`port_guard.py`), with
`worker_args.py`'s argv, stores what they send and restarts one that dies or goes silent. A
worker's side: `worker_main.py` (its entry: the gRPC service of ingest/ on the held port), its
`summary_store.py` (each accepted report summarized, the newest per node) and `frame_loops.py`
(the link's two directions). `frames.py` is what crosses the link. Their series on the extender's
/metrics: observe/worker_metrics.py. (The gpu-relay, a separate program between agents and
extenders, is relay/.)
"""
