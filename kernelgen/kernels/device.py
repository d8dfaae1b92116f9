"""What a CUDA device is to kernelgen: one frozen description, read once per device.

The JIT layer reads a device's properties once (``jit.runtime.device``) into a ``Device``; the
decider (``selection.decide``) and the loader take it as an input, so nothing asks the driver
twice and the decision can be made on the CPU for a described device.
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec import ARCHS

#: The switch that lets a device of an untested compute capability (``spec.UNTESTED_ARCHS``: 10.x,
#: 12.x) run the sm_80 path compiled for its arch; read by ``selection.settings.Settings``.
ALLOW_UNTESTED_ARCH_ENV = "KERNELGEN_ALLOW_UNTESTED_ARCH"

#: Supported compute capabilities, in words, for error messages and docs.
SUPPORTED_TEXT = ("compute capability 8.0, 8.6, 8.7, 8.9 (sm_80, sm_86 (8.7 runs its cubins), sm_89: the sm_80 "
                  "mma.sync path) "
                  "or 9.0 (sm_90a: the Hopper wgmma/TMA path)")
#: The untested ones, in words, as docs/install.md puts them (messages name both, never "sm_80 and later").
UNTESTED_TEXT = (f"10.x and 12.x (Blackwell: sm_100, sm_120, the sm_80 path) are untested on hardware and run "
                 f"only with {ALLOW_UNTESTED_ARCH_ENV}=1")


def _untested_arch(major: int) -> str | None:
    """The compile target of the sm_80 path on an untested major (a cubin runs on every minor of
    its major at or above its own): 10.x -> sm_100, 12.x -> sm_120."""
    return {10: "sm_100", 12: "sm_120"}.get(major)


def arch_for_capability(major: int, minor: int, allow_untested: bool = False) -> str:
    """Compile target for a device's compute capability: the exact arch, with 'a' on Hopper.

    ``allow_untested`` (``KERNELGEN_ALLOW_UNTESTED_ARCH=1``): Blackwell (10.x -> sm_100, 12.x ->
    sm_120) gets the sm_80 path compiled for its arch, which NVRTC builds but no test has run.

    Raises RuntimeError for a compute capability kernelgen has no kernels for, or an untested one
    without ``allow_untested`` (the message names the switch).
    """
    cc = major * 10 + minor
    if cc == 90:
        return "sm_90a"
    if cc in (80, 86, 89):
        return f"sm_{cc}"
    if cc == 87:
        return "sm_86"  # an sm_86 cubin runs on 8.7 (same major, higher minor)
    untested = _untested_arch(major)
    if untested is not None:
        if allow_untested:
            return untested
        raise RuntimeError(
            f"compute capability {major}.{minor} (Blackwell) is not supported: kernelgen's kernels are tested on "
            f"{SUPPORTED_TEXT}; its Hopper kernels (wgmma) do not run on Blackwell.  Set "
            f"{ALLOW_UNTESTED_ARCH_ENV}=1 to run the sm_80 path compiled for {untested} (it compiles, but no "
            f"kernelgen test has run on such a GPU)"
        )
    raise RuntimeError(
        f"compute capability {major}.{minor} is not supported by kernelgen's kernels "
        f"(supported: {', '.join(ARCHS)}: {SUPPORTED_TEXT})"
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
        """Compile target (e.g. 'sm_90a' on an H100/H200); RuntimeError for an unsupported device
        (an untested one included: ``compile_arch``)."""
        return arch_for_capability(*self.cc)

    def compile_arch(self, allow_untested: bool = False) -> str:
        """Compile target, with untested compute capabilities (Blackwell) allowed when
        ``allow_untested`` (``Settings.allow_untested_arch``); RuntimeError otherwise."""
        return arch_for_capability(*self.cc, allow_untested=allow_untested)

    @classmethod
    def from_properties(cls, raw: dict) -> "Device":
        """From CUDA's device properties as CuPy's ``getDeviceProperties`` returns them (name,
        major, minor, multiProcessorCount, l2CacheSize, sharedMemPerBlockOptin)."""
        name = raw["name"]
        return cls(name=name.decode() if isinstance(name, bytes) else str(name),
                   cc=(int(raw["major"]), int(raw["minor"])), num_sms=int(raw["multiProcessorCount"]),
                   l2_bytes=int(raw["l2CacheSize"]), smem_optin=int(raw.get("sharedMemPerBlockOptin", 0)))
