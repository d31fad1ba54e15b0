"""PodResources v1: wire-compatible with the kubelet's `v1.PodResourcesLister` service."""
