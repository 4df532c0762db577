"""What the host's CPU is, in the terms that decide vLLM-CPU's numerics and speed.

vLLM-CPU picks its kernels by instruction set: AMX tiles, AVX512-BF16, plain AVX-512, or AVX2
only. bf16 results differ between those families (greedy outputs can differ), and speed differs
by an order of magnitude, so every speed and every reference names the family it came from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuInfo:
    """The CPU as speedbench reports it next to a number.

    Attributes:
        model: The model name from /proc/cpuinfo (e.g. "AMD EPYC").
        kernel_family: ``amx``, ``avx512_bf16``, ``avx512``, ``avx2`` or ``other``: the best
            instruction set vLLM-CPU's kernels use here.
        avx512: Whether AVX-512 (foundation) is present.
        bf16: Whether bf16 arithmetic is native (AVX512-BF16 or AMX-BF16).
        amx: Whether AMX tiles are present.
        cores: Logical CPUs.
    """

    model: str
    kernel_family: str
    avx512: bool
    bf16: bool
    amx: bool
    cores: int

    def as_dict(self) -> dict[str, object]:
        """Plain-JSON form."""
        return asdict(self)

    def describe(self) -> str:
        """One line for a report: model, core count and the features that matter."""
        yes = {True: "yes", False: "no"}
        return (
            f"{self.model}, {self.cores} cores, AVX-512 {yes[self.avx512]}, "
            f"native bf16 {yes[self.bf16]}, AMX {yes[self.amx]} (kernels: {self.kernel_family})"
        )


def cpu_info(cpuinfo: str | None = None) -> CpuInfo:
    """Parse /proc/cpuinfo (or the given text)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags: set[str] = set()
    model, cores = "unknown", 0
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            cores += 1
        elif key == "model name" and model == "unknown":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    amx = bool(flags & {"amx_tile", "amx_bf16"})
    bf16 = bool(flags & {"avx512_bf16", "amx_bf16"})
    avx512 = "avx512f" in flags
    if "amx_bf16" in flags:
        family = "amx"
    elif "avx512_bf16" in flags:
        family = "avx512_bf16"
    elif avx512:
        family = "avx512"
    elif "avx2" in flags:
        family = "avx2"
    else:
        family = "other"
    return CpuInfo(model, family, avx512, bf16, amx, cores)
