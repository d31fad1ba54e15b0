"""The cluster inventory: Nodes and OME's custom resources, kept in memory.

Sources (Kubernetes list+watch, or YAML files on disk) push objects into an
`InventorySink`; the request path only ever reads the in-memory store.
"""
