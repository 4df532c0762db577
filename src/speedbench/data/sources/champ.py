"""CHAMP: 270 competition math problems with concepts and hints, from the champ-dataset wheel."""

from __future__ import annotations

import json

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import packaged_file

WHEEL = ("champ-dataset", "1.0.0")
MEMBER = r"champ_dataset/dataset_files/v0\.json$"
INSTRUCTION = "Solve the following competition math problem. Show your reasoning step by step.\n\n"


@register_source("champ", ("math",), "champ-dataset 1.0.0: champ_dataset/dataset_files/v0.json")
def champ_rows() -> RawRows:
    """One prompt per problem, its CHAMP topic as the sub-category."""
    data = json.loads(packaged_file(WHEEL, MEMBER))
    for pid, p in sorted(data["problems"].items()):
        text = p.get("_text")
        yield (
            pid,
            {
                "category": "math",
                "sub_category": str(p.get("category", "")).lower(),
                "difficulty": "competition",
                "turns": [INSTRUCTION + text] if isinstance(text, str) else text,
            },
        )
