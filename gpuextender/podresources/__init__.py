"""Our copy of the kubelet's PodResources gRPC API (the parts gpu-agent uses)."""
