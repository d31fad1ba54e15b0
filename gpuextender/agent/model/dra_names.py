"""The names NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, driver `gpu.nvidia.com`)
gives GPUs in its ResourceSlices, and so in the kubelet's PodResources `dynamic_resources`, which
carry no UUID:

- a whole GPU: "gpu-<minor>", the NVML minor number (/dev/nvidia<minor>), not the NVML index;
- a MIG device: "gpu-<parent minor>-mig-<profile>-<profile id>-<placement start>", the profile
  in its name form (`name_form`): no dots, as a device name may hold none ("1g.10gb" -> "1g10gb",
  "1g.12gb+me" -> "1g12gb-me"); the ResourceSlice's `profile` attribute keeps the NVML form.

One home for the convention: the agent maps a held device name to its GPU with it and reports each
GPU's name next to its UUID, so the extender joins agent data to slice devices without guessing."""

from __future__ import annotations

import re
from dataclasses import dataclass

NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
# A DRA device name is a DNS label (resource.k8s.io validation): at most 63 characters.
MAX_DEVICE_NAME_CHARS = 63
_GPU = re.compile(r"gpu-(0|[1-9][0-9]{0,5})")
_MIG = re.compile(r"gpu-(0|[1-9][0-9]{0,5})-mig-([0-9a-z.+-]{1,32})-([0-9]{1,6})-([0-9]{1,6})")
_NOT_IN_A_NAME = re.compile(r"[^a-z0-9-.]")


def name_form(profile: str) -> str:
    """A MIG profile as the driver writes it in a device name: dots dropped, then lower case, any
    other character outside [a-z0-9-] a hyphen, hyphens trimmed at both ends (its toRFC1123Compliant)."""
    return _NOT_IN_A_NAME.sub("-", profile.replace(".", "").lower()).strip("-")


@dataclass(frozen=True, slots=True)
class DraDeviceName:
    """What a device name says: its GPU's minor number and, for a MIG device, its profile."""

    minor: int
    mig_profile: str = ""  # "" for a whole GPU
    mig_profile_id: int = -1
    mig_placement_start: int = -1


def gpu_device_name(minor: int | None) -> str:
    """The device name of a whole GPU with NVML minor number `minor` ("" when unknown)."""
    return "" if minor is None or minor < 0 else f"gpu-{minor}"


def parse_device_name(name: str) -> DraDeviceName | None:
    """The GPU a device name of NVIDIA's driver names; None for any other name."""
    if len(name) > MAX_DEVICE_NAME_CHARS:
        return None
    whole = _GPU.fullmatch(name)
    if whole is not None:
        return DraDeviceName(int(whole.group(1)))
    mig = _MIG.fullmatch(name)
    if mig is not None:
        return DraDeviceName(int(mig.group(1)), mig.group(2), int(mig.group(3)), int(mig.group(4)))
    return None
