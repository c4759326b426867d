"""What the clouds' GPU machine types carry: the accelerator model and how many per node.

A class that says `g2-standard-8` with two GPUs would provision nodes with one, and the
scheduler would plan for two: `validate` refuses such a class. Machine types not listed here
are not checked (new families appear often); the table lists the common GPU families.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    model: str  # a word every accelerator name of this model contains (GKE types, EKS labels): "l4", "h100"
    count: int
    gke_accelerator: str | None = None  # the exact guest accelerator type GKE expects


def _gke(prefix: str, accelerator: str, model: str, counts: dict[str, int]) -> dict[str, Machine]:
    return {f"{prefix}{suffix}": Machine(model, n, accelerator) for suffix, n in counts.items()}


def _eks(family: str, model: str, counts: dict[str, int]) -> dict[str, Machine]:
    return {f"{family}.{size}": Machine(model, n) for size, n in counts.items()}


_G2 = {"standard-4": 1, "standard-8": 1, "standard-12": 1, "standard-16": 1, "standard-32": 1, "standard-24": 2,
       "standard-48": 4, "standard-96": 8}
_HIGHGPU = {"highgpu-1g": 1, "highgpu-2g": 2, "highgpu-4g": 4, "highgpu-8g": 8}
_EKS_G = {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4, "24xlarge": 4,
          "48xlarge": 8}

GKE: dict[str, Machine] = {
    **_gke("g2-", "nvidia-l4", "l4", _G2),
    **_gke("a2-", "nvidia-tesla-a100", "a100", {**_HIGHGPU, "megagpu-16g": 16}),
    **_gke("a2-ultragpu-", "nvidia-a100-80gb", "a100", {"1g": 1, "2g": 2, "4g": 4, "8g": 8}),
    **_gke("a3-", "nvidia-h100-80gb", "h100", {**_HIGHGPU, "edgegpu-8g": 8}),
    **_gke("a3-megagpu-", "nvidia-h100-mega-80gb", "h100", {"8g": 8}),
    **_gke("a3-ultragpu-", "nvidia-h200-141gb", "h200", {"8g": 8}),
    **_gke("a4-highgpu-", "nvidia-b200", "b200", {"8g": 8}),
    **_gke("a4x-highgpu-", "nvidia-gb200", "gb200", {"4g": 4}),
}

EKS: dict[str, Machine] = {
    **_eks("g5", "a10g", _EKS_G),
    **_eks("g6", "l4", _EKS_G),
    **_eks("g6e", "l40s", _EKS_G),
    **_eks("p4d", "a100", {"24xlarge": 8}),
    **_eks("p4de", "a100", {"24xlarge": 8}),
    **_eks("p5", "h100", {"4xlarge": 1, "48xlarge": 8}),
    **_eks("p5e", "h200", {"48xlarge": 8}),
    **_eks("p5en", "h200", {"48xlarge": 8}),
    **_eks("p6-b200", "b200", {"48xlarge": 8}),
}


AKS: dict[str, Machine] = {
    "Standard_NC24ads_A100_v4": Machine("a100", 1), "Standard_NC48ads_A100_v4": Machine("a100", 2),
    "Standard_NC96ads_A100_v4": Machine("a100", 4), "Standard_ND96asr_v4": Machine("a100", 8),
    "Standard_ND96amsr_A100_v4": Machine("a100", 8), "Standard_NC40ads_H100_v5": Machine("h100", 1),
    "Standard_NC80adis_H100_v5": Machine("h100", 2), "Standard_ND96isr_H100_v5": Machine("h100", 8),
    "Standard_ND96isr_H200_v5": Machine("h200", 8), "Standard_NV36ads_A10_v5": Machine("a10", 1),
    "Standard_NC4as_T4_v3": Machine("t4", 1), "Standard_NC8as_T4_v3": Machine("t4", 1),
    "Standard_NC16as_T4_v3": Machine("t4", 1), "Standard_NC64as_T4_v3": Machine("t4", 4),
}
_NEBIUS_PRESET = re.compile(r"^(\d+)gpu-")
_NEBIUS_PLATFORM = re.compile(r"^gpu-([a-z0-9]+)")


def nebius_machine(platform: str | None, preset: str | None) -> Machine | None:
    """A Nebius GPU platform and preset: `gpu-h100-sxm` + `8gpu-128vcpu-1600gb` is 8 x H100."""
    model, count = _NEBIUS_PLATFORM.match(platform or ""), _NEBIUS_PRESET.match(preset or "")
    return Machine(model.group(1), int(count.group(1))) if model and count else None


FIELDS = {"GKE": "machineType", "EKS": "instanceType", "AKS": "vmSize", "Nebius": "preset"}


def shape_problems(provider: str, machine_type: str | None, accelerator_type: str | None,
                   accelerator_count: int | None, gpu_devices: int | None,
                   platform: str | None = None) -> list[tuple[str, str]]:
    """(field, message) for every way the class disagrees with its machine type; [] when it agrees or is unknown.

    `machine_type` is the GKE machine type, EKS instance type, AKS VM size, or the Nebius preset (with `platform`)."""
    if provider == "Nebius":
        machine = nebius_machine(platform, machine_type)
        machine_type = f"{platform} {machine_type}"
    else:
        machine = {"GKE": GKE, "EKS": EKS, "AKS": AKS}.get(provider, {}).get(machine_type or "")
    if machine is None:
        return []
    out = []
    field = FIELDS[provider]
    if accelerator_type is not None:
        if machine.gke_accelerator and accelerator_type != machine.gke_accelerator:
            out.append(("accelerator.type", f"{machine_type} carries {machine.gke_accelerator}, not {accelerator_type}"))
        elif machine.model not in accelerator_type.lower():
            out.append(("accelerator.type", f"{machine_type} carries {machine.model.upper()} GPUs, not {accelerator_type}"))
    if accelerator_count is not None and accelerator_count != machine.count:
        out.append(("accelerator.count", f"{machine_type} carries {machine.count} GPU(s) per node, not {accelerator_count}"))
    if gpu_devices is not None and gpu_devices != machine.count:
        out.append((field, f"{machine_type} carries {machine.count} GPU(s) per node, but the class's devices "
                           f"publish {gpu_devices}: the scheduler would plan for devices that do not exist"))
    return out
