"""The environment variables that change what the dispatcher chooses, read once per call signature.

``Settings.from_env()`` reads them when a call signature is first seen (``varlen_attention``) or a
plan is made (``AttentionPlan``) and the decider takes the result as an input
(``selection.decide``), so no choosing function reads the environment itself:

- ``KERNELGEN_ARCH``: the mainloop of calls whose ``arch`` argument is None ("sm_80", "sm_90a",
  "auto"; ``validation.arch``);
- ``KERNELGEN_SM90_OPTS``: the Hopper mainloop's option letters (``heuristics.SM90_OPTS``), for
  tuning runs;
- ``KERNELGEN_SM90_SHORT_ROWS``: query rows of the Hopper fused launch's decode tile, 8 or 16
  (``heuristics.SM90_FUSED_SHORT_ROWS``; on an FP8 cache ``SM90_FUSED_SHORT_ROWS_FP8``);
- ``KERNELGEN_MIXED_SHORT_CTAS``: CTAs of the Hopper fused launch that start on the short queue,
  0 .. the SMs (``heuristics.SM90_MIXED_SHORT_FRACTION``; ``SM90_MIXED_SHORT_FRACTION_FP8`` with the
  FP8 keys-as-rows decode tile);
- ``KERNELGEN_ALLOW_UNTESTED_ARCH``: "1" (or "true", "yes", "on") lets a GPU of an untested compute
  capability (Blackwell: 10.x, 12.x) run the sm_80 path compiled for its arch (sm_100, sm_120;
  ``kernels.device.arch_for_capability``); unset, such a GPU is refused with a message naming it;
- ``KERNELGEN_TIERED_COMPILE``: "0" (or "false", "no", "off") turns off the tiered first call of a
  new user variant (``selection.tiered``: the sm_80 kernel runs while the Hopper kernel builds in
  the background); unset or any other value: on.
- ``KERNELGEN_FP8_FUSED``: "0" (or "false", "no", "off") runs a mixed batch on an FP8 cache as the
  classes in turn instead of the Hopper fused kernel (A/B measurements); unset or any other
  value: the fused kernel where it applies.
- ``KERNELGEN_SM90_PACK_GQA``: "1" (or "true", "yes", "on") lets the Hopper prefill kernel pack the
  query heads of a KV head into its tiles wherever it can (``heuristics.SM90_PACK_GQA``); "0" (or
  "false", "no", "off") keeps it off; unset: the default, automatic (where it was measured to pay,
  ``heuristics.sm90_pack_auto``); any other value fails the calls and plans made while it is set
  (``Settings.check``), with a ValueError naming it.

Values are kept as read; each is checked where the decider uses it (``sm90_short_rows``,
``mixed_short_ctas``), so a malformed variable fails only the calls it concerns, with a
ValueError naming it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..kernels.device import ALLOW_UNTESTED_ARCH_ENV

ARCH = "KERNELGEN_ARCH"
SM90_OPTS = "KERNELGEN_SM90_OPTS"
SM90_SHORT_ROWS = "KERNELGEN_SM90_SHORT_ROWS"
MIXED_SHORT_CTAS = "KERNELGEN_MIXED_SHORT_CTAS"
ALLOW_UNTESTED_ARCH = ALLOW_UNTESTED_ARCH_ENV
TIERED_COMPILE = "KERNELGEN_TIERED_COMPILE"
FP8_FUSED = "KERNELGEN_FP8_FUSED"
SM90_PACK_GQA = "KERNELGEN_SM90_PACK_GQA"
#: The words ``KERNELGEN_SM90_PACK_GQA`` takes for on and off (any case).
ON_WORDS = ("1", "true", "yes", "on")
OFF_WORDS = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Settings:
    """The overrides of one call signature (None: the variable is unset, the default applies)."""

    arch: str | None = None
    sm90_opts: str | None = None
    short_rows: str | None = None
    short_ctas: str | None = None
    allow_untested_arch: bool = False
    #: ``KERNELGEN_TIERED_COMPILE`` not "0" / "false" / "no" / "off" (any case): a new user
    #: variant's first calls may run the sm_80 kernel while its Hopper kernel builds
    tiered_compile: bool = True
    #: ``KERNELGEN_FP8_FUSED`` not "0" / "false" / "no" / "off": an FP8 mixed batch may take the
    #: Hopper fused kernel
    fp8_fused: bool = True
    #: ``KERNELGEN_SM90_PACK_GQA``: True / False when set to an on / off word, None when unset (the
    #: default, ``heuristics.SM90_PACK_GQA``)
    sm90_pack_gqa: bool | None = None
    #: ``KERNELGEN_SM90_PACK_GQA`` as read when it is neither an on / off word nor blank (``check``
    #: raises for it; ``sm90_pack_gqa`` is then None)
    bad_sm90_pack_gqa: str | None = None

    @classmethod
    def from_env(cls, environ=None) -> "Settings":
        """The overrides set in ``environ`` (default ``os.environ``) now; blank values count as unset
        for the two numeric ones."""
        env = os.environ if environ is None else environ
        rows, ctas = env.get(SM90_SHORT_ROWS, "").strip(), env.get(MIXED_SHORT_CTAS, "").strip()
        allow = env.get(ALLOW_UNTESTED_ARCH, "").strip().lower() in ("1", "true", "yes", "on")
        tiered = env.get(TIERED_COMPILE, "").strip().lower() not in ("0", "false", "no", "off")
        fp8_fused = env.get(FP8_FUSED, "").strip().lower() not in ("0", "false", "no", "off")
        pack = env.get(SM90_PACK_GQA, "").strip().lower()
        sm90_pack = True if pack in ON_WORDS else False if pack in OFF_WORDS else None
        return cls(arch=env.get(ARCH), sm90_opts=env.get(SM90_OPTS), short_rows=rows or None,
                   short_ctas=ctas or None, allow_untested_arch=allow, tiered_compile=tiered, fp8_fused=fp8_fused,
                   sm90_pack_gqa=sm90_pack,
                   bad_sm90_pack_gqa=env.get(SM90_PACK_GQA) if pack and sm90_pack is None else None)

    def check(self) -> "Settings":
        """Self, once the variables read as words or letters are valid.  Raises ValueError naming
        ``KERNELGEN_SM90_PACK_GQA`` when it is set to something other than an on / off word, and
        ``KERNELGEN_SM90_OPTS`` when it holds a letter that is not a Hopper mainloop option
        (``spec.SM90_OPTS``; the kernel spec's own check would not name the variable)."""
        if self.bad_sm90_pack_gqa is not None:
            raise ValueError(f"{SM90_PACK_GQA} must be one of {ON_WORDS + OFF_WORDS} (any case) or unset, "
                             f"got {self.bad_sm90_pack_gqa!r}")
        if self.sm90_opts:
            from ..kernels.spec import SM90_OPTS as LETTERS

            bad = sorted(set(self.sm90_opts) - set(LETTERS))
            if bad:
                raise ValueError(f"{SM90_OPTS} must hold option letters of {LETTERS!r} (e.g. 'hpr'), got "
                                 f"{self.sm90_opts!r} ({', '.join(map(repr, bad))} unknown)")
        return self

    def sm90_short_rows(self) -> int | None:
        """``KERNELGEN_SM90_SHORT_ROWS`` as 8 or 16, None when unset.  Raises ValueError naming the
        variable for any other value."""
        if self.short_rows is None:
            return None
        if self.short_rows not in ("8", "16"):
            raise ValueError(f"{SM90_SHORT_ROWS} must be 8 or 16, got {self.short_rows!r}")
        return int(self.short_rows)

    def mixed_short_ctas(self, num_sms: int) -> int | None:
        """``KERNELGEN_MIXED_SHORT_CTAS`` as an int in [0, num_sms], None when unset.  Raises
        ValueError naming the variable for a value that is not such an int."""
        if self.short_ctas is None:
            return None
        try:
            n = int(self.short_ctas)
        except ValueError:
            raise ValueError(f"{MIXED_SHORT_CTAS} must be an int, got {self.short_ctas!r}") from None
        if not 0 <= n <= num_sms:
            raise ValueError(f"{MIXED_SHORT_CTAS} must be in [0, {num_sms}], got {n}")
        return n


def allow_untested_arch(environ=None) -> bool:
    """``KERNELGEN_ALLOW_UNTESTED_ARCH`` as set now (``Settings.allow_untested_arch``), for the
    commands that ask for a device's compile target outside a call (warmup, demo, bench, doctor)."""
    return Settings.from_env(environ).allow_untested_arch
