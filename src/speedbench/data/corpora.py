"""Long real-text corpora for the throughput split, one registered corpus per domain.

Each corpus belongs to an entropy tier (low: code; mixed: technical and encyclopedic text;
high: essays, people's requests and dialogue) and yields ``Document``s in a fixed order. All of
them arrive offline: the running interpreter's standard library, the Python documentation from
the Debian ``python3.11-doc`` package (fetched with ``apt-get download``, never installed), and
the data files of three evaluation wheels (data/sources/long_context.py, lm_eval.py,
inspect_evals.py). Adding a corpus is one function and one ``@register_corpus``.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from speedbench.data.sources import inspect_evals, lm_eval, long_context
from speedbench.provision.pypi import CACHE_ROOT, FetchError

Tier = Literal["low", "mixed", "high"]


@dataclass(frozen=True)
class Document:
    """One real document; ``question`` is a question about it where the source has one."""

    doc_id: str
    text: str
    question: str = ""


@dataclass(frozen=True)
class Corpus:
    """A registered domain of long text."""

    name: str
    tier: Tier
    instruction: str
    header: str
    documents: Callable[[], Iterator[Document]]


CORPORA: dict[str, Corpus] = {}


def register_corpus(name: str, tier: Tier, instruction: str, header: str = ""):
    """Register a document generator as corpus ``name``.

    Args:
        name: Unique corpus name (the ``sub_category`` of its prompts).
        tier: Its entropy tier.
        instruction: The task put in front of the context.
        header: A per-document heading with ``{doc_id}``, e.g. a file name for code.
    """

    def wrap(fn: Callable[[], Iterator[Document]]) -> Callable[[], Iterator[Document]]:
        if name in CORPORA:
            raise ValueError(f"corpus {name!r} registered twice")
        CORPORA[name] = Corpus(name, tier, instruction, header, fn)
        return fn

    return wrap


class CorpusError(ValueError):
    """A corpus is unknown or unavailable. One-line message."""


def get_corpus(name: str) -> Corpus:
    """The registered corpus ``name``; an unknown name lists the known ones."""
    if name not in CORPORA:
        raise CorpusError(f"unknown corpus {name!r}; known: {', '.join(sorted(CORPORA))}")
    return CORPORA[name]


# --- low entropy: code -------------------------------------------------------------------------


@register_corpus(
    "python_stdlib",
    "low",
    "Below are Python source files. Continue the last file with its next function or class, "
    "in the same style.",
    header="# File: {doc_id}\n",
)
def python_stdlib() -> Iterator[Document]:
    """The running interpreter's standard library modules (tests excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if skip & set(rel.parts):
            continue
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            yield Document(f"py{sys.version_info.major}.{sys.version_info.minor}/{rel}", text)


@register_corpus(
    "python_site_packages",
    "low",
    "Below are Python source files. Continue the last file with its next function or class, "
    "in the same style.",
    header="# File: {doc_id}\n",
)
def python_site_packages() -> Iterator[Document]:
    """Source files of the installed distributions, named ``dist-version/path``.

    The text depends on what is installed, so the default run leaves this corpus out; the full
    preset needs it for enough distinct code at 8k tokens and up.
    """
    from importlib.metadata import distributions

    seen: set[str] = set()
    for dist in sorted(distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
        name = dist.metadata["Name"]
        if not name or name.lower() in seen:
            continue
        seen.add(name.lower())
        for f in sorted(dist.files or [], key=str):
            parts = set(f.parts)
            if f.suffix != ".py" or parts & {"tests", "test", "testing"}:
                continue
            path = Path(str(dist.locate_file(f)))
            try:
                text = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                continue
            if len(text) > 200:
                yield Document(f"{name}-{dist.version}/{f}", text)


# --- mixed entropy: technical and encyclopedic text ---------------------------------------------

PYDOC_DEB = "python3.11-doc"
DEB_CACHE = CACHE_ROOT / "debs"
RST_ROOT = "usr/share/doc/python3.11/html/_sources"


def python_docs_dir(cache: Path = DEB_CACHE) -> Path:
    """The reST sources of the Python 3.11 docs, from the Debian package (downloaded once)."""
    out = cache / PYDOC_DEB
    if (out / RST_ROOT).is_dir():
        return out / RST_ROOT
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["apt-get", "download", PYDOC_DEB], cwd=cache, capture_output=True, text=True, check=False
    )
    debs = sorted(cache.glob(f"{PYDOC_DEB}_*.deb"))
    if proc.returncode != 0 or not debs:
        last = (proc.stderr.strip().splitlines() or ["apt-get not found"])[-1]
        raise FetchError(f"apt-get download {PYDOC_DEB} failed: {last}")
    tmp = out.with_name(out.name + ".part")
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(tmp)], check=True)
    tmp.replace(out)
    return out / RST_ROOT


@register_corpus(
    "python_docs",
    "mixed",
    "Below are pages of the Python documentation in reStructuredText. Write a tutorial section "
    "that explains the topic of the last page, with examples.",
    header="Page: {doc_id}\n",
)
def python_docs() -> Iterator[Document]:
    """The Python 3.11 documentation's reST sources (Debian python3.11-doc)."""
    root = python_docs_dir()
    for path in sorted(root.rglob("*.rst.txt")):
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            yield Document(str(path.relative_to(root)).removesuffix(".rst.txt"), text)


@register_corpus(
    "pydoc_topics",
    "mixed",
    "Below are entries of the Python language reference. Explain the last entry in plain words, "
    "with an example.",
    header="Topic: {doc_id}\n",
)
def pydoc_topics() -> Iterator[Document]:
    """The language-reference topics that ``help()`` shows (stdlib pydoc_data)."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield Document(name, topics[name].strip())


@register_corpus(
    "squad_articles",
    "mixed",
    "Read the encyclopedia articles below, then answer the question at the end.",
    header="Article: {doc_id}\n",
)
def squad_articles() -> Iterator[Document]:
    """The 35 Wikipedia articles behind SQuAD 2.0's dev set, with one answerable question each."""
    for i, article in enumerate(long_context.squad_articles()):
        paras = article.get("paragraphs", [])
        text = "\n".join(p["context"].strip() for p in paras)
        qas = [qa for p in paras for qa in p.get("qas", []) if not qa.get("is_impossible")]
        title = str(article.get("title") or f"squad-{i}").replace("_", " ")
        yield Document(title, text, qas[0]["question"] if qas else "")


@register_corpus(
    "wiki_paragraphs",
    "mixed",
    "Below are encyclopedia texts. Summarize the last one in English.",
)
def wiki_paragraphs() -> Iterator[Document]:
    """HotpotQA's Wikipedia lead paragraphs, the ten of each question as one document."""
    for row in long_context.hotpot_questions():
        paragraphs = [long_context.hotpot_paragraph(entry) for entry in row["context"]]
        yield Document(f"hotpotqa-{row['_id']}", "\n".join(paragraphs))


# --- high entropy: essays, requests, dialogue ----------------------------------------------------


@register_corpus(
    "essays",
    "high",
    "Below are essays. Write a reply to the last one that argues against one of its points.",
)
def essays() -> Iterator[Document]:
    """Paul Graham's essays, whole, named by their date and length."""
    for essay in long_context.paul_graham_essays():
        yield Document(long_context.essay_id(essay), essay)


@register_corpus(
    "writing_requests",
    "high",
    "Below are requests that people sent to a writing assistant. Write the reply to the last one.",
    header="Request {doc_id}:\n",
)
def writing_requests() -> Iterator[Document]:
    """WritingBench's English requests, reference material included, at any length."""
    for r in inspect_evals.writingbench_requests():
        if not inspect_evals.is_chinese(r["query"]):
            yield Document(str(r["index"]), r["query"].strip())


@register_corpus(
    "writing_requests_zh",
    "high",
    "Below are requests in Chinese that people sent to a writing assistant. Write the reply to "
    "the last one, in Chinese.",
    header="Request {doc_id}:\n",
)
def writing_requests_zh() -> Iterator[Document]:
    """WritingBench's Chinese requests, reference material included, at any length."""
    for r in inspect_evals.writingbench_requests():
        if inspect_evals.is_chinese(r["query"]):
            yield Document(str(r["index"]), r["query"].strip())


@register_corpus(
    "support_dialogues",
    "high",
    "Below are conversations between people and a government help site's assistant. Continue the "
    "last one with three more exchanges.",
)
def support_dialogues() -> Iterator[Document]:
    """ChatRAG-Bench's Doc2Dial conversations, each at its longest, a message a line."""
    longest: dict[tuple[str, str], list[dict[str, str]]] = {}
    for turn in lm_eval.chatrag_turns():
        messages = turn["messages"]
        key = (turn["document"], messages[0]["content"])
        if len(messages) > len(longest.get(key, [])):
            longest[key] = messages
    for i, ((site, _), messages) in enumerate(longest.items()):
        text = "\n".join(f"{m['role']}: {m['content'].strip()}" for m in messages)
        yield Document(f"doc2dial-{site}-{i}", text)
