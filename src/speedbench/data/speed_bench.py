"""SPEED-Bench's own dataset, in every layout its users hold it, and its placeholder rows.

The dataset (``nvidia/SPEED-Bench``; configs ``qualitative`` and ``throughput_{1k..32k}``;
columns question_id, category, sub_category, turns, source, src_id, difficulty, multiturn)
reaches users in three layouts, all read here from local files:

- **the hub's files**: ``<root>/<config>/*.parquet`` (a snapshot of the dataset repository),
  or the hub itself through ``datasets`` when no folder is given (network, on request only);
- **specdec_bench's prepared data** (NVIDIA Model-Optimizer ``examples/specdec_bench``,
  ``prepare_data.py``): ``<root>/speed/<config>/test.parquet``, the same columns with every
  turn rebuilt from its source;
- **NeMo-Skills' JSONL** (``nemo_skills/dataset/speed-bench/prepare.py``), which vLLM's
  ``bench serve --dataset-name speed_bench --dataset-path <root>`` reads:
  ``<root>/<config>.jsonl`` with ``messages`` (``[{"role": "user", "content": turn}]``) in
  place of ``turns``.

Rows of sources that may not be redistributed ship on the hub with a first turn that starts
with :data:`PLACEHOLDER`; specdec_bench's prepare step rebuilds them and its runner refuses a
dataset while one remains. So does speedbench (:func:`drop_placeholders`), before any engine
starts, unless the user asks to skip them, and then the results record how many were skipped.
The throughput configs' categories (``low_entropy``, ``mixed``, ``high_entropy``) are mapped to
speedbench's entropy tiers (``low``, ``mixed``, ``high``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from speedbench.data.prompts import PromptRow, PromptSetError, load_prompt_file, parse_rows

HUB_DATASET = "nvidia/SPEED-Bench"
CONFIGS = (
    "qualitative",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
)
# A split of this name is SPEED-Bench's config after the prefix (AIPerf names them so too).
SPLIT_PREFIX = "speed_bench_"
# specdec_bench's own test (TURNS_PLACEHOLDER, datasets/speed.py): a turn starting with it.
PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
REBUILD = (
    "rebuild them with specdec_bench's prepare step (NVIDIA Model-Optimizer "
    "examples/specdec_bench: python prepare_data.py --config {config}) and pass its "
    "data/speed/{config}/test.parquet"
)
# SPEED-Bench's throughput categories -> speedbench's entropy tiers.
ENTROPY_TIERS = {"low_entropy": "low", "mixed": "mixed", "high_entropy": "high"}


def split_name(config: str) -> str:
    """The split speedbench measures SPEED-Bench's ``config`` as."""
    return f"{SPLIT_PREFIX}{config}"


def config_of_split(name: str) -> str | None:
    """SPEED-Bench's config behind split ``name`` (None: not one of SPEED-Bench's)."""
    config = name.removeprefix(SPLIT_PREFIX)
    return config if name.startswith(SPLIT_PREFIX) and config in CONFIGS else None


def config_of_path(path: str | Path) -> str | None:
    """The config a file or folder of one of the three layouts holds (None: not recognised).

    ``<config>.jsonl`` (NeMo-Skills), ``<config>/test*.parquet`` (specdec_bench, the hub) and a
    ``<config>`` folder. speedbench's own ``qualitative.parquet`` is not SPEED-Bench's.
    """
    path = Path(path)
    if path.is_dir():
        return path.name if path.name in CONFIGS else None
    if path.suffix == ".jsonl" and path.stem in CONFIGS:
        return path.stem
    if path.suffix == ".parquet" and path.stem.startswith("test") and path.parent.name in CONFIGS:
        return path.parent.name
    return None


def is_placeholder(row: PromptRow) -> bool:
    """Whether a row is a stand-in for a turn that must be fetched from its source."""
    return any(turn.startswith(PLACEHOLDER) for turn in row.turns)


def drop_placeholders(
    rows: list[PromptRow], origin: str, skip: bool, config: str | None = None
) -> tuple[list[PromptRow], int]:
    """The rows without placeholders, and how many there were.

    Raises:
        PromptSetError: Placeholders are present and ``skip`` is false: one line with their
            count, their sources and how to rebuild them.
    """
    found = [r for r in rows if is_placeholder(r)]
    if found and not skip:
        by_source = Counter(r.source or "no source" for r in found)
        sources = ", ".join(f"{s} ({n})" for s, n in sorted(by_source.items()))
        how = REBUILD.format(config=config or "<config>")
        raise PromptSetError(
            f"{origin}: {len(found)} of {len(rows)} rows are SPEED-Bench placeholders, not "
            f"prompts (sources: {sources}); {how}, or pass --skip-placeholders to measure "
            "without them"
        )
    kept = [r for r in rows if not is_placeholder(r)]
    if not kept:
        raise PromptSetError(f"{origin}: every row is a SPEED-Bench placeholder; nothing to run")
    return kept, len(found)


def with_entropy_tiers(rows: list[PromptRow]) -> list[PromptRow]:
    """Throughput rows with their categories as speedbench's tiers (others unchanged)."""
    if not rows or any(r.category not in ENTROPY_TIERS for r in rows):
        return rows
    return [r.model_copy(update={"category": ENTROPY_TIERS[r.category]}) for r in rows]


def config_path(root: str | Path, config: str) -> Path:
    """Where ``config`` is under ``root``: its JSONL file or its folder of Parquet files.

    Raises:
        PromptSetError: No layout holds it, or more than one does (which would be measured is
            then a guess).
    """
    root = Path(root)
    if config not in CONFIGS:
        raise PromptSetError(f"unknown SPEED-Bench config {config!r}; known: {', '.join(CONFIGS)}")
    if not root.is_dir():
        raise PromptSetError(f"SPEED-Bench folder not found: {root}")
    layouts = {
        "NeMo-Skills JSONL": root / f"{config}.jsonl",
        "specdec_bench": root / "speed" / config,
        "hub files": root / config,
    }
    found = {
        name: path
        for name, path in layouts.items()
        if path.is_file() or (path.is_dir() and any(path.glob("*.parquet")))
    }
    if not found:
        raise PromptSetError(
            f"no SPEED-Bench {config} under {root}: looked for {config}.jsonl (NeMo-Skills), "
            f"speed/{config}/*.parquet (specdec_bench) and {config}/*.parquet (the hub's files)"
        )
    if len(found) > 1:
        where = "; ".join(f"{name}: {path}" for name, path in found.items())
        raise PromptSetError(f"SPEED-Bench {config} is under {root} twice ({where}); keep one")
    return next(iter(found.values()))


def load_speed_bench(
    config: str = "qualitative",
    root: str | Path | None = None,
    revision: str | None = None,
    data_files: str | Path | list[str] | None = None,
) -> list[PromptRow]:
    """Rows of a SPEED-Bench config, validated like every other prompt set.

    Args:
        config: One of ``CONFIGS``.
        root: A local folder holding the config in one of the three layouts; nothing is
            downloaded.
        revision: Hub revision (commit or tag) to pin, when read from the hub.
        data_files: Parquet file(s) of the hub's schema (the hub loader on local files).

    Without ``root`` or ``data_files`` the rows come from the hub (network). Placeholder rows
    are kept here; :func:`drop_placeholders` decides about them.
    """
    if config not in CONFIGS:
        raise PromptSetError(f"unknown SPEED-Bench config {config!r}; known: {', '.join(CONFIGS)}")
    if root is not None:
        return with_entropy_tiers(load_prompt_file(config_path(root, config)))
    import datasets

    if data_files is not None:
        files = [str(f) for f in data_files] if isinstance(data_files, list) else [str(data_files)]
        dataset = datasets.load_dataset("parquet", data_files={"test": files}, split="test")
        origin = ", ".join(files)
    else:
        dataset = datasets.load_dataset(HUB_DATASET, config, split="test", revision=revision)
        origin = f"{HUB_DATASET}:{config}@{revision or 'main'}"
    raw: list[dict[str, Any]] = [dict(r) for r in dataset]
    return with_entropy_tiers(parse_rows(raw, origin))
