"""DRA objects (resource.k8s.io/v1) as NVIDIA's DRA driver and kube-scheduler write them, for tests:
../shared/reference/dra.md has the shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GPU_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def device_class(
    name: str = "gpu.nvidia.com", extended: str | None = "nvidia.com/gpu", cel: str = GPU_CLASS_CEL
) -> dict:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": cel}}]}
    if extended is not None:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def gpu_device(
    minor: int, *, taint: str = "", product: str = "NVIDIA H100 80GB HBM3", uuid: str | None = None
) -> dict[str, Any]:
    """`uuid`: the GPU's NVML UUID (default: one no agent reports); "" publishes none."""
    device: dict[str, Any] = {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{minor:08x}-0000-0000-0000-000000000000" if uuid is None else uuid},
            "productName": {"string": product},
            "cudaComputeCapability": {"version": "9.0.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{minor // 4:02x}"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
    if uuid == "":
        del device["attributes"]["uuid"]
    if taint:
        device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": taint}]
    return device


def mig_device(parent: int, profile: str = "1g.10gb", placement: int = 0) -> dict[str, Any]:
    return {
        "name": f"gpu-{parent}-mig-{profile.replace('.', '')}-19-{placement}",  # no dots in a device name
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "parentUUID": {"string": f"GPU-{parent:08x}-0000-0000-0000-000000000000"},
        },
        "capacity": {"memory": {"value": "10Gi"}},
    }


def resource_slice(
    node: str,
    devices: list[dict[str, Any]],
    *,
    name: str | None = None,
    driver: str = "gpu.nvidia.com",
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        },
    }


def gpu_slice(
    node: str,
    gpus: int = 8,
    *,
    tainted: tuple[int, ...] = (),
    effect: str = "NoSchedule",
    uuid_of: Callable[[int], str] | None = None,
) -> dict:
    """`uuid_of(minor)`: each device's uuid attribute (the agent's GPU UUIDs, for the join)."""
    return resource_slice(
        node,
        [
            gpu_device(i, taint=effect if i in tainted else "", uuid=uuid_of(i) if uuid_of else None)
            for i in range(gpus)
        ],
    )


def allocated_claim(
    name: str, node: str, devices: list[str], *, namespace: str = "default", pool: str | None = None
) -> dict[str, Any]:
    """A claim as kube-scheduler leaves it after allocating `devices` (names) of `node`'s pool."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": pool or node, "device": d}
                        for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"pod-{name}"}],
        },
    }


MIG_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


def mig_class(name: str = "mig.nvidia.com", profile: str = "") -> dict:
    """NVIDIA's MIG DeviceClass (no extended resource); `profile`: one that pins a profile too."""
    cel = MIG_CLASS_CEL + (f" && device.attributes['gpu.nvidia.com'].profile == '{profile}'" if profile else "")
    return device_class(name, None, cel)


def mig_claim(
    name: str, count: int = 1, *, profile: str = "1g.10gb", device_class: str = "mig.nvidia.com", namespace: str = "ml"
) -> dict[str, Any]:
    """A claim not allocated yet asking for `count` MIG devices whose profile its selector requires
    ("": no selector)."""
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if profile:
        exactly["selectors"] = [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": exactly}]}},
    }
