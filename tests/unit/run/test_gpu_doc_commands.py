"""docs/gpu.md's own commands, run as written through ``speedbench plan`` (nothing started).

A GPU user's first step is to paste the guide's command. Every ``speedbench plan`` or ``sweep``
command in its bash blocks is run here with ``plan`` (the same flags, nothing launched), after
the block's ``export`` lines, and must print one launch per configuration; the first one is
also run against each of the three engines the guide's table describes.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from speedbench import REPO_ROOT
from speedbench.cli import main

GUIDE = Path(REPO_ROOT) / "docs" / "gpu.md"
ENGINES = ("vllm", "sglang", "trtllm")


def guide_commands() -> list[tuple[dict[str, str], list[str]]]:
    """(exports, argv) of every speedbench plan/sweep command in the guide's bash blocks."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), flags=re.S):
        lines = block.replace("\\\n", " ").splitlines()
        exports = {}
        for line in lines:
            words = shlex.split(line, comments=True)
            if words[:1] == ["export"]:
                name, _, value = words[1].partition("=")
                exports[name] = value
            elif words[:1] == [".venv/bin/speedbench"] and words[1] in ("plan", "sweep"):
                out.append((dict(exports), ["plan", *words[2:]]))
    return out


def configs(argv: list[str]) -> int:
    """Launches the form asks for: the baseline and each SD method at each draft length."""
    methods = argv[argv.index("--methods") + 1 :]
    methods = methods[: next((i for i, w in enumerate(methods) if w.startswith("--")), None)]
    if "--draft-lengths" not in argv:  # the form's default
        from speedbench.sweep_config import SweepConfig

        lengths = [str(k) for k in SweepConfig().draft_lengths]
    else:
        lengths = argv[argv.index("--draft-lengths") + 1 :]
        lengths = lengths[: next((i for i, w in enumerate(lengths) if w.startswith("--")), None)]
    return 1 + len([m for m in methods if m != "none"]) * len(lengths)


def test_the_guide_has_commands_to_run():
    assert len(guide_commands()) >= 2


@pytest.mark.parametrize("index", range(len(guide_commands())))
def test_each_guide_command_plans_every_configuration(index, monkeypatch, capsys):
    exports, argv = guide_commands()[index]
    for name, value in exports.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "nothing was started" in out
    assert out.count("\n## ") == configs(argv)
    assert out.count("$ docker run --gpus all") == configs(argv)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_first_guide_command_plans_on_each_engine(engine, capsys):
    _, argv = guide_commands()[0]
    argv = list(argv)
    argv[argv.index("--engine") + 1] = engine
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.count("\n## ") == configs(argv)
    # Inside the container the drafter is read at its mount: the host's path appears only in
    # the mount itself, never in the argv, a launch file or a request.
    draft = argv[argv.index("--draft-model") + 1]
    for block in out.split("\n## ")[1:]:
        assert block.count(draft) == block.count(f"-v {draft}:"), block
