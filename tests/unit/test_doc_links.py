"""Every relative link in the README, docs/ and results/ READMEs points at something that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "results").rglob("README.md")),
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(path: Path) -> list[str]:
    targets = [m.group(1).split("#")[0] for m in LINK.finditer(path.read_text())]
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    missing = [t for t in relative_links(doc) if not (doc.parent / t).exists()]
    assert missing == [], f"{doc.relative_to(ROOT)} links to missing {missing}"


def test_the_link_pattern_finds_links():
    assert relative_links(ROOT / "README.md")  # the README links docs; a broken regex finds none


# A repository path in backticks (`tests/unit/x.py`) is a claim about this tree too.
CODE_PATH = re.compile(
    r"`((?:tests|scripts|src|benchmarks|flows|tasks|containers|presets)/[\w./-]+\.[a-z]+)`"
)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_named_in_backticks_exist(doc):
    named = {m.group(1) for m in CODE_PATH.finditer(doc.read_text())}
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
