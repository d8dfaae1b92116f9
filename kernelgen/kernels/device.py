"""What a CUDA device is to kernelgen: one frozen description, read once per device.

The JIT layer reads a device's properties once (``jit.runtime.device``) into a ``Device``; the
decider (``selection.decide``) and the loader take it as an input, so nothing asks the driver
twice and the decision can be made on the CPU for a described device.
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec import ARCHS


def arch_for_capability(major: int, minor: int) -> str:
    """Compile target for a device's compute capability: the exact arch, with 'a' on Hopper.

    Raises RuntimeError for a compute capability kernelgen has no kernels for.
    """
    cc = major * 10 + minor
    if cc == 90:
        return "sm_90a"
    if cc in (80, 86, 89):
        return f"sm_{cc}"
    if cc == 87:
        return "sm_86"  # an sm_86 cubin runs on 8.7 (same major, higher minor)
    raise RuntimeError(
        f"compute capability {major}.{minor} is not supported by kernelgen's kernels "
        f"(supported: {', '.join(ARCHS)})"
    )


@dataclass(frozen=True)
class Device:
    """A CUDA device's properties that kernelgen's choices depend on.

    name: the device's name; cc: compute capability (major, minor); num_sms: streaming
    multiprocessors; l2_bytes: L2 cache size in bytes; smem_optin: the most dynamic shared memory
    one CTA may opt into, in bytes (0 if unknown).
    """

    name: str
    cc: tuple
    num_sms: int
    l2_bytes: int
    smem_optin: int = 0

    @property
    def arch(self) -> str:
        """Compile target (e.g. 'sm_90a' on an H100/H200); RuntimeError for an unsupported device."""
        return arch_for_capability(*self.cc)

    @classmethod
    def from_properties(cls, raw: dict) -> "Device":
        """From CUDA's device properties as CuPy's ``getDeviceProperties`` returns them (name,
        major, minor, multiProcessorCount, l2CacheSize, sharedMemPerBlockOptin)."""
        name = raw["name"]
        return cls(name=name.decode() if isinstance(name, bytes) else str(name),
                   cc=(int(raw["major"]), int(raw["minor"])), num_sms=int(raw["multiProcessorCount"]),
                   l2_bytes=int(raw["l2CacheSize"]), smem_optin=int(raw.get("sharedMemPerBlockOptin", 0)))
