"""speedbench's splits written in SPEED-Bench's own layouts, so the peers' tools read them.

AIPerf (``--custom-dataset-type speed-bench-qualitative``), ``vllm bench serve --dataset-name
speed_bench`` and specdec_bench read SPEED-Bench's configs (``qualitative``,
``throughput_{1k,2k,8k,16k,32k}``) in one of three layouts (see :mod:`speedbench.data.speed_bench`).
:func:`export_splits` writes every split speedbench built in all three, each under its own root
so that none holds a config twice (which :func:`~speedbench.data.speed_bench.config_path` refuses):

- ``<out>/nemo_skills/<config>.jsonl``: NeMo-Skills' ``prepare.py`` rows, the hub's columns with
  ``turns`` replaced by ``messages`` (one user message per turn), which AIPerf and vLLM read;
- ``<out>/specdec_bench/speed/<config>/test.parquet``: specdec_bench's prepared data;
- ``<out>/hub/<config>/test-00000-of-00001.parquet``: the dataset repository's files.

Rows carry exactly the hub's columns and types (``multiturn`` a bool, every other column a
string, ``turns`` a list of strings) and SPEED-Bench's throughput categories (``low_entropy``,
``mixed``, ``high_entropy``). SPEED-Bench's ids are 32 hex characters (AIPerf refuses shorter
ones); speedbench's content ids (a letter and 16 hex) map to such an id reversibly
(:func:`speed_bench_id`, :func:`speedbench_id`), so a result measured by a peer on the export
joins speedbench's own; ``<out>/question_ids.json`` lists every pair. speedbench's random-token
controls are not exported: SPEED-Bench has none and their prompts are token ids, not text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from speedbench.data.prompts import PromptRow, PromptSetError, load_prompt_file
from speedbench.data.qualitative import SPLIT_COLUMNS
from speedbench.data.speed_bench import CONFIGS, ENTROPY_TIERS

LAYOUTS = ("nemo_skills", "specdec_bench", "hub")
# speedbench builds its splits with the hub's columns in the hub's order.
HUB_COLUMNS = tuple(SPLIT_COLUMNS)
TIER_CATEGORIES = {tier: category for category, tier in ENTROPY_TIERS.items()}
CONTENT_ID = re.compile(r"^([a-z])([0-9a-f]{16})$")
ID_LENGTH = 32


def _digest(text: str) -> str:
    return hashlib.sha256(f"speedbench/{text}".encode()).hexdigest()


def speed_bench_id(question_id: str) -> str:
    """SPEED-Bench's 32-hex-character id for one of speedbench's.

    A content id (``q`` or ``r`` and 16 hex) becomes its 16 hex, the letter's code in hex and 14
    hex of a checksum, so :func:`speedbench_id` recovers it; any other id becomes 32 hex of its
    SHA-256 (one way: ``question_ids.json`` holds the pair).
    """
    match = CONTENT_ID.match(question_id)
    if match is None:
        return _digest(question_id)[:ID_LENGTH]
    letter, body = match.groups()
    return f"{body}{ord(letter):02x}{_digest(question_id)[:14]}"


def speedbench_id(speed_bench_question_id: str) -> str | None:
    """The speedbench content id an exported id came from (None: not one of speedbench's)."""
    if len(speed_bench_question_id) != ID_LENGTH:
        return None
    body, code = speed_bench_question_id[:16], speed_bench_question_id[16:18]
    try:
        letter = chr(int(code, 16))
    except ValueError:
        return None
    candidate = f"{letter}{body}"
    if CONTENT_ID.match(candidate) and speed_bench_id(candidate) == speed_bench_question_id:
        return candidate
    return None


def config_of_split_file(path: Path) -> str | None:
    """The SPEED-Bench config a split file of speedbench's build becomes (None: none).

    ``qualitative.parquet`` is ``qualitative``; ``throughput_<bucket>.parquet`` is
    ``throughput_<bucket>`` where that is one of SPEED-Bench's five; the random controls and
    other buckets have no config.
    """
    return path.stem if path.suffix == ".parquet" and path.stem in CONFIGS else None


def hub_row(row: PromptRow) -> dict[str, Any]:
    """One row in the hub's columns, types and categories."""
    category = TIER_CATEGORIES.get(row.category, row.category)
    return {
        "question_id": speed_bench_id(row.question_id),
        "category": category,
        "sub_category": row.sub_category,
        "turns": list(row.turns),
        "source": row.source,
        "src_id": row.src_id,
        "difficulty": row.difficulty,
        "multiturn": bool(row.multiturn),
    }


def nemo_skills_row(hub: dict[str, Any]) -> dict[str, Any]:
    """A hub row as NeMo-Skills' ``prepare.py`` writes it: ``turns`` become user messages."""
    out = {k: v for k, v in hub.items() if k != "turns"}
    out["messages"] = [{"role": "user", "content": turn} for turn in hub["turns"]]
    return out


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"turns": pa.list_(pa.string()), "multiturn": pa.bool_()}
    schema = pa.schema([(name, types.get(name, pa.string())) for name in HUB_COLUMNS])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    tmp.replace(path)


def _write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(nemo_skills_row(row), ensure_ascii=False) + "\n")
    tmp.replace(path)


def layout_paths(out_dir: str | Path, config: str) -> dict[str, Path]:
    """Where each layout's file of ``config`` goes under ``out_dir``."""
    out = Path(out_dir)
    return {
        "nemo_skills": out / "nemo_skills" / f"{config}.jsonl",
        "specdec_bench": out / "specdec_bench" / "speed" / config / "test.parquet",
        "hub": out / "hub" / config / "test-00000-of-00001.parquet",
    }


def export_config(rows: list[PromptRow], config: str, out_dir: str | Path) -> dict[str, Path]:
    """Write ``rows`` as SPEED-Bench's ``config`` in the three layouts; return the files.

    Raises:
        PromptSetError: An unknown config, no rows, or two rows that map to one id.
    """
    if config not in CONFIGS:
        raise PromptSetError(f"unknown SPEED-Bench config {config!r}; known: {', '.join(CONFIGS)}")
    if not rows:
        raise PromptSetError(f"{config}: no rows to export")
    hub = [hub_row(r) for r in rows]
    clashes = [i for i, n in Counter(h["question_id"] for h in hub).items() if n > 1]
    if clashes:
        raise PromptSetError(f"{config}: two rows map to the SPEED-Bench id {clashes[0]}")
    paths = layout_paths(out_dir, config)
    _write_jsonl(hub, paths["nemo_skills"])
    _write_parquet(hub, paths["specdec_bench"])
    _write_parquet(hub, paths["hub"])
    return paths


def export_splits(splits: list[str | Path], out_dir: str | Path) -> dict[str, Any]:
    """Export every split file (or every file in a split folder) speedbench built.

    Returns a summary: the files of each config, the rows and categories per config, the files
    skipped and why. ``<out_dir>/question_ids.json`` maps each exported id to speedbench's.

    Raises:
        PromptSetError: A split that does not read, or two files for one config.
    """
    files: list[Path] = []
    for entry in map(Path, splits):
        if not entry.exists():
            raise PromptSetError(f"split not found: {entry}")
        files += sorted(entry.glob("*.parquet")) if entry.is_dir() else [entry]
    by_config: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    for path in files:
        config = config_of_split_file(path)
        if config is None:
            why = (
                "a random-token control (SPEED-Bench has none; its prompts are token ids)"
                if path.stem.endswith("_random")
                else f"not one of SPEED-Bench's configs ({', '.join(CONFIGS)})"
            )
            skipped[str(path)] = why
            continue
        if config in by_config:
            raise PromptSetError(f"{config} twice: {by_config[config]} and {path}; pass one")
        by_config[config] = path
    if not by_config:
        raise PromptSetError(
            f"nothing to export among {len(files)} file(s): no qualitative.parquet or "
            "throughput_{1k,2k,8k,16k,32k}.parquet"
        )
    summary: dict[str, Any] = {"configs": {}, "skipped": skipped}
    ids: dict[str, str] = {}
    for config, path in sorted(by_config.items()):
        rows = load_prompt_file(path)
        written = export_config(rows, config, out_dir)
        ids.update({speed_bench_id(r.question_id): r.question_id for r in rows})
        summary["configs"][config] = {
            "from": str(path),
            "rows": len(rows),
            "categories": dict(
                sorted(Counter(TIER_CATEGORIES.get(r.category, r.category) for r in rows).items())
            ),
            "files": {layout: str(p) for layout, p in written.items()},
        }
    id_file = Path(out_dir) / "question_ids.json"
    id_file.write_text(json.dumps(dict(sorted(ids.items())), indent=1) + "\n")
    summary["question_ids"] = str(id_file)
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """The export as a console table."""
    lines = [f"{'config':16s} {'rows':>5s}  categories"]
    for config, entry in summary["configs"].items():
        cats = ", ".join(f"{c}:{n}" for c, n in entry["categories"].items())
        lines.append(f"{config:16s} {entry['rows']:5d}  {cats}")
    lines += [f"skipped {path}: {why}" for path, why in summary["skipped"].items()]
    return "\n".join(lines)
