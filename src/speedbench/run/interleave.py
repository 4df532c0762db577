"""The interleaved grid: a grid point's configs measured in alternating rounds in one window.

A speedup divides an SD level's throughput by the baseline's. Measured one config after
another, minutes apart, the host's drift lands in the ratio: on a 2-core VM the draft's bs-1
speedup read 1.03x, 1.25x and 1.07x in three runs with identical acceptance. Here the configs
of one grid point (the no-SD baseline and every SD config at one split and batch size) are
measured in rounds: each round runs one repeat of every config, in a seeded random order per
round, so whatever the host does during the window hits both sides of every ratio alike, and
the rounds give each speedup an interval (:mod:`speedbench.metrics.paired`).

Two ways to have the engines at hand (``LoadSection.interleave``):

- ``resident``: every config's engine is up at once, each on its own port, idle while another
  is measured. Their memory must fit together; vLLM-CPU engines share the CPU KV budget
  (:func:`resident_engine`). An idle engine's CPU time is measured during every repeat of
  the others (``HostFigures.sibling_cpu_s``), so an engine that spins when idle is caught.
- ``relaunch``: one engine at a time, launched for each block and stopped after it, for
  engines that cannot share the host (one GPU). Each block then pays a launch; the rounds
  still alternate.

Levels keep their folders, identities and records (:mod:`speedbench.run.level`); a level's
repeats are its rounds. A grid point is resumed only whole: a point with one config missing
is measured again for every config, since its speedups pair rounds of one window.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.engines.running import RunningEngine
from speedbench.run.level import LevelResult, LevelRun
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

# The CPU KV budget (GiB) that vLLM-CPU engines kept up together divide among themselves.
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


def round_orders(labels: Sequence[str], rounds: int, seed: int | None) -> list[list[str]]:
    """Each round's order of the configs: a seeded random permutation per round.

    A fixed order would give one config the host's state right after another's (caches,
    frequency, the other engine's last OpenMP spin) every round; a random one spreads that
    over all of them. The same seed gives the same orders.
    """
    rng = random.Random(f"interleave:{seed or 0}")
    return [rng.sample(list(labels), len(labels)) for _ in range(rounds)]


def resident_engine(engine: EngineConfig, index: int, count: int) -> EngineConfig:
    """The ``index``-th of ``count`` engines kept up together: its own port, its KV share.

    vLLM-CPU reserves its KV cache up front (``VLLM_CPU_KVCACHE_SPACE`` GiB): engines up at
    once divide the one budget (at least 1 GiB each), unless the host's environment sets the
    size itself.
    """
    update: dict[str, object] = {"port": engine.port + index}
    space = engine.env.get(KV_SPACE_ENV)
    if space is not None and KV_SPACE_ENV not in os.environ and count > 1:
        share = max(1, int(float(space)) // count)
        update["env"] = {**engine.env, KV_SPACE_ENV: str(share)}
    return engine.model_copy(update=update)


# A vLLM-CPU engine's resident memory against its weight files, measured on a 2-core Xeon
# (AVX-512, native bf16, AMX) with three bf16 engines up, 1 GiB of KV cache each, engine core
# and API server together: the target alone 6.7 GiB (3.2 GiB of weights), with the draft
# 8.7 GiB (4.3 GiB): about 1.8 times the weights plus the KV cache, so a second copy of most
# weights (the kernels' packed layouts). Those three, 22.2 GiB, left a 23.6 GiB host 96 MiB
# and thrashing.
WEIGHT_FACTOR = 1.8
# What one engine holds beyond that (torch, vLLM, its API server), in GiB.
RUNTIME_GIB = 0.25
# What the host keeps for the sweep's own process, its client and the engines' code pages.
HEADROOM_GIB = 1.5
GIB = 1024**3


def weights_gib(model: str | None) -> float:
    """The size of a local model folder's weight files in GiB (0 for a hub id or no model)."""
    if not model or not Path(model).is_dir():
        return 0.0
    files = [*Path(model).glob("*.safetensors"), *Path(model).glob("*.bin")]
    return sum(f.stat().st_size for f in files) / GIB


def resident_gib(engine: EngineConfig, spec: SpecConfig) -> float:
    """About how much host memory one resident engine takes: weights (packed), KV cache, runtime."""
    kv = float(engine.env.get(KV_SPACE_ENV) or os.environ.get(KV_SPACE_ENV) or 0)
    weights = weights_gib(engine.model) + weights_gib(spec.draft_model)
    return WEIGHT_FACTOR * weights + kv + RUNTIME_GIB


def available_gib() -> float | None:
    """MemAvailable of this host in GiB (None where /proc/meminfo does not say)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        return None
    return None


def check_resident_fits(
    engines: Mapping[str, EngineConfig], specs: Mapping[str, SpecConfig]
) -> None:
    """Refuse resident engines that would not fit this host's memory together (before any launch).

    Engines on a GPU or on another machine (docker_host) are not counted: their memory is not
    this host's.

    Raises:
        EngineError: One line with the estimate, what the host has, and what to set instead.
    """
    here = {
        label: resident_gib(e, specs[label])
        for label, e in engines.items()
        if not e.gpus and not e.docker_host
    }
    have = available_gib()
    need = sum(here.values())
    if have is None or len(here) < 2 or need + HEADROOM_GIB <= have:
        return
    each = ", ".join(f"{label} {gib:.1f}" for label, gib in here.items())
    raise EngineError(
        f"interleave resident keeps {len(here)} engines up at once, about {need:.1f} GiB "
        f"({each}: {WEIGHT_FACTOR:g} x weights, KV cache and {RUNTIME_GIB:g} GiB each) and "
        f"{HEADROOM_GIB:g} GiB for the sweep, and the host has {have:.1f} GiB available: set "
        "interleave: relaunch (one launch per block), measure fewer SD configs per sweep, or "
        "use bfloat16 weights"
    )


def measure_interleaved(
    labels: Sequence[str],
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    directories: Mapping[str, os.PathLike[str] | str],
    engine_for: Callable[[str], AbstractContextManager[RunningEngine]],
    resident: Mapping[str, RunningEngine] | None = None,
    on_block: Callable[[int, str], None] | None = None,
) -> dict[str, LevelResult]:
    """Measure one grid point's configs in ``settings.repeats`` alternating rounds.

    Args:
        labels: The configs at this grid point (baseline and SD), by label.
        items: The level's prompts (the same for every config).
        settings: The level's load settings; ``repeats`` is the number of rounds.
        tokenizer: The target's tokenizer (templates text prompts; None: token ids only).
        directories: Each config's level folder.
        engine_for: Opens a config's engine for one block (``relaunch``); with ``resident``
            the engines are already up and this is not called.
        resident: The configs' engines kept up for the whole grid, by label.
        on_block: Called before each block with (round, label): progress for the caller.

    Returns:
        Each config's level (a level whose engine died holds ``failed``; the others go on).
    """
    levels: dict[str, LevelRun] = {}
    stopped: set[str] = set()
    try:
        for rnd, order in enumerate(round_orders(labels, settings.repeats, settings.seed)):
            for label in order:
                if label in stopped:
                    continue
                if on_block is not None:
                    on_block(rnd, label)
                with contextlib.ExitStack() as stack:
                    if resident is not None:
                        running = resident[label]
                        siblings = [e for other, e in resident.items() if other != label]
                    else:
                        running = stack.enter_context(engine_for(label))
                        siblings = []
                    level = levels.get(label)
                    if level is None:
                        level = levels[label] = LevelRun(
                            running, items, settings, tokenizer, Path(directories[label]),
                            siblings=siblings,
                        )  # fmt: skip
                    level.running = running
                    if not level.measure_repeat(rnd):
                        stopped.add(label)
                        # Judged now, while the engine that failed is still the level's.
                        level.failure = level.failure_now()
    except BaseException:
        for level in levels.values():
            level.abandon()
        raise
    return {label: levels[label].finish(check_engine=resident is not None) for label in levels}
