"""A grid point, what defines it, and the hooks through which an entry point changes a sweep.

:func:`speedbench.run.sweep.run_grid` calls a :class:`SweepHooks` for every step an entry
point may wrap or record: the CLI resumes from disk (:class:`DiskResume`), the Prefect flow runs
steps as tasks and logs levels to MLflow. A level is found again by its identity (what defines
it: engine, SD config, split, load point, output settings), hashed into ``identity.json`` in its
folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.launchers import OpenEngine, engine_session
from speedbench.engines.running import RunningEngine
from speedbench.run.interleave import EngineSlot, measure_interleaved
from speedbench.run.level import LevelResult, load_level, measure_level
from speedbench.sweep_summary import SummaryRow, load_key
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

IDENTITY_FILE = "identity.json"


@dataclasses.dataclass(frozen=True, eq=False)
class GridPoint:
    """One level of the grid: where its results go and what defines it.

    A closed-loop level has ``batch_size`` streams; an open-loop one a ``request_rate``, with
    the sweep's concurrency cap as its ``batch_size`` (0: uncapped).
    """

    spec: SpecConfig
    split: str
    batch_size: int
    directory: Path
    identity: dict[str, Any]
    request_rate: float | None = None
    per_category: int | None = None  # the level's prompts per category (None: the split's all)

    @property
    def load(self) -> str:
        """The load point, ``bs<N>`` or ``rate<R>``: the level's folder and its name's end."""
        return load_key(self.batch_size, self.request_rate)

    @property
    def name(self) -> str:
        """``<config> <split> bs<N>`` (or ``rate<R>``), as runs and log lines are named."""
        return f"{self.spec.label} {self.split} {self.load}"

    @property
    def identity_hash(self) -> str:
        """A short stable hash of the identity (MLflow tag, resume key)."""
        return config_hash(self.identity)


def config_hash(identity: dict[str, Any]) -> str:
    """A short stable hash of a configuration identity."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class SweepHooks:
    """What an entry point adds to the runner. The defaults measure in-process, track nothing.

    Subclasses override the steps they wrap (the Prefect flow runs ``start_engine`` and
    ``run_level`` as tasks) and the events they record (``level_done`` and ``level_failed``
    log MLflow runs). ``resumed`` returns a level measured before to keep instead of
    re-measuring it.
    """

    def resumed(self, point: GridPoint) -> LevelResult | None:
        """A finished earlier measurement of ``point`` to keep (None: measure it)."""
        return None

    def start_engine(self, engine: EngineConfig, spec: SpecConfig, log_path: Path) -> OpenEngine:
        """Launch the engine for one SD config (healthy and warmed up)."""
        return OpenEngine(engine, spec, log_path)

    def run_level(
        self,
        running: RunningEngine,
        items: Sequence[WorkItem],
        settings: LoadSettings,
        tokenizer: PromptTokenizer | None,
        directory: Path,
    ) -> LevelResult:
        """Measure one level; its records are on disk as they arrive."""
        return measure_level(running, items, settings, tokenizer, directory)

    def run_interleaved(
        self,
        specs: Mapping[str, SpecConfig],
        items: Sequence[WorkItem],
        settings: LoadSettings,
        tokenizer: PromptTokenizer | None,
        directories: Mapping[str, Path],
        engines: Mapping[str, EngineConfig],
        resident: Mapping[str, RunningEngine] | None,
        log_paths: Mapping[str, Path],
        slot: EngineSlot | None = None,
    ) -> dict[str, LevelResult]:
        """Measure one grid point's configs in alternating rounds, by label.

        ``resident``: the engines up for the whole grid; ``slot``: the one the other configs
        take turns in; ``resident`` None: each block launches its config's engine
        (``engines[label]``, logging to ``log_paths[label]``).
        """

        def engine_for(label: str) -> AbstractContextManager[RunningEngine]:
            return engine_session(engines[label], specs[label], log_paths[label])

        def progress(rnd: int, label: str) -> None:
            print(f"round {rnd + 1}/{settings.repeats}: {label} {settings.split} "
                  f"bs{settings.batch_size}")  # fmt: skip

        return measure_interleaved(
            list(specs), items, settings, tokenizer, directories, engine_for, resident,
            on_block=progress if settings.show_progress else None, slot=slot,
        )  # fmt: skip

    def engine_version(self, handle: OpenEngine) -> str:
        """The started engine's version, recorded with the sweep's provenance."""
        return handle.running.version()

    def level_done(self, point: GridPoint, level: LevelResult, row: SummaryRow) -> None:
        """A level was measured (``level.failed`` says whether the engine died during it)."""

    def level_failed(self, point: GridPoint, error: str, log_path: Path) -> None:
        """A level could not be measured because its config's engine failed."""


class DiskResume(SweepHooks):
    """Keep levels already on disk whose identity matches and whose engine did not fail."""

    def resumed(self, point: GridPoint) -> LevelResult | None:
        """The level on disk, if it was finished with the same identity."""
        kept = finished_on_disk(point)
        if kept is not None:
            print(f"skip {point.name}: measured earlier with the same settings ({kept.directory})")
        return kept


def finished_on_disk(point: GridPoint) -> LevelResult | None:
    """The level measured earlier at ``point``, if its identity matches and it did not fail."""
    stamp = point.directory / IDENTITY_FILE
    if not stamp.exists() or json.loads(stamp.read_text()).get("hash") != point.identity_hash:
        return None
    level = load_level(
        point.directory, point.spec.label, point.split, point.batch_size, point.request_rate
    )
    return level if level is not None and not level.failed else None


def stamp_identity(point: GridPoint) -> None:
    """Write what defines the level into its folder (the disk half of the resume key)."""
    point.directory.mkdir(parents=True, exist_ok=True)
    stamp = {"hash": point.identity_hash, "identity": point.identity}
    (point.directory / IDENTITY_FILE).write_text(json.dumps(stamp, indent=2, sort_keys=True))


# What defines a level: (SD config, split, batch size, request rate) -> identity.
Identity = Callable[[SpecConfig, str, int, float | None], dict[str, Any]]
# Prompts per category a level measures: (batch size, request rate) -> count (None: all).
PerCategory = Callable[[int, float | None], int | None]


def level_identity(
    engine: EngineConfig, settings: LoadSettings, model: str | None = None
) -> Identity:
    """What defines a level on ``engine`` under ``settings``, for each SD config and load point.

    The engine, the SD config, the split, the load point and what was generated. Fields added
    after the first sweeps appear only when set, so earlier levels keep their identity (and
    their MLflow resume key). ``model`` names the target where ``engine.model`` is this
    machine's path to it (a form names it; :func:`speedbench.run.plan.config_identity` adds
    the form's prompt selection).
    """

    def identity(
        spec: SpecConfig, split: str, batch_size: int, request_rate: float | None
    ) -> dict[str, Any]:
        ident: dict[str, Any] = {
            "engine": engine.kind,
            "launcher": engine.launcher,
            "model": model or engine.model,
            "dtype": engine.dtype,
            # variant only where set: the identities of earlier sweeps stay as they were.
            "spec": spec.model_dump(exclude=None if spec.variant else {"variant"}),
            "split": split,
            "batch_size": batch_size,
            "output_len": settings.max_tokens,
            "temperature": settings.temperature,
            "seed": settings.seed,
        }
        if request_rate is not None:
            ident["load"] = {
                "request_rate": request_rate,
                "arrival": settings.arrival,
                "burstiness": settings.burstiness,
                "max_concurrency": settings.max_concurrency,
            }
        if settings.warmup_requests:
            ident["warmup_requests"] = settings.warmup_requests
        if settings.repeats > 1:
            ident["repeats"] = settings.repeats
        if settings.interleave != "off":  # its rounds pair with the other configs' in time
            ident["interleave"] = settings.interleave
        if settings.objectives:  # the level's metrics hold its goodput under these
            ident["objectives"] = settings.objectives
        if not settings.ignore_eos:
            ident["stop_at_eos"] = True
        if engine.prefix_cache != "keep":  # earlier sweeps kept the cache
            ident["prefix_cache"] = engine.prefix_cache
        return ident

    return identity
