"""The official nvidia/SPEED-Bench splits from the Hugging Face hub (network only on request).

``load_speed_bench("qualitative")`` is the path for users with hub access. ``data_files`` points
the same code at local Parquet files of the same schema, which is how it is tested offline and
how a user loads a mirrored copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speedbench.data.prompts import PromptRow, PromptSetError, parse_rows

HUB_DATASET = "nvidia/SPEED-Bench"
HUB_CONFIGS = (
    "qualitative",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
)


def load_speed_bench(
    config: str = "qualitative",
    data_files: str | Path | list[str] | None = None,
    revision: str | None = None,
    split: str = "test",
) -> list[PromptRow]:
    """Rows of a SPEED-Bench config, validated like every other prompt set.

    Args:
        config: One of ``HUB_CONFIGS``.
        data_files: Local Parquet file(s) of the same schema; when given, nothing is downloaded.
        revision: Hub revision (commit or tag) to pin, for reproducible runs.
        split: The split name; the hub dataset ships ``test`` only.
    """
    if config not in HUB_CONFIGS:
        raise PromptSetError(
            f"unknown SPEED-Bench config {config!r}; known: {', '.join(HUB_CONFIGS)}"
        )
    import datasets

    if data_files is not None:
        files = [str(f) for f in data_files] if isinstance(data_files, list) else [str(data_files)]
        dataset = datasets.load_dataset("parquet", data_files={split: files}, split=split)
        origin = ", ".join(files)
    else:
        dataset = datasets.load_dataset(HUB_DATASET, config, split=split, revision=revision)
        origin = f"{HUB_DATASET}:{config}@{revision or 'main'}"
    raw: list[dict[str, Any]] = [dict(r) for r in dataset]
    return parse_rows(raw, origin)
