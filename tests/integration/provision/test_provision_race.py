"""Two processes provisioning the same packaged model at once (two test workers, two stages).

One process converts under the model's lock; the other waits for it and finds the finished
folder, so neither reads a half-written tokenizer or weights and the conversion runs once.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from speedbench.provision.models import PROVENANCE, fetch_gguf

# A whole provisioning twice over (about 75 s on 2 cores): make test-e2e, which CI runs.
pytestmark = [pytest.mark.integration, pytest.mark.e2e]

NAME = "qwen2.5-coder-0.5b-instruct"
PROVISION_AND_LOAD = """
import sys
from pathlib import Path
from speedbench.provision.models import provision
from speedbench.tokenize import PromptTokenizer
out = provision(sys.argv[1], cache=Path(sys.argv[2]), dtype="float32")
PromptTokenizer.from_pretrained(str(out))
print(out)
"""


def test_two_processes_provisioning_at_once_both_get_the_whole_folder(tmp_path):
    # The verified GGUF is shared (a link), so only the conversion itself runs twice.
    gguf = fetch_gguf(NAME)
    (tmp_path / NAME).mkdir()
    (tmp_path / NAME / gguf.name).symlink_to(gguf)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROVISION_AND_LOAD, NAME, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    for rc, _, err in results:
        assert rc == 0, err[-2000:]
    out = tmp_path / NAME / "hf-float32"
    assert {r[1].strip() for r in results} == {str(out)}
    assert json.loads((out / PROVENANCE).read_text())["dtype"] == "float32"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    conversions = [err for _, _, err in results if "de-quantizing" in err]
    assert len(conversions) == 1
    leftovers = [p.name for p in (tmp_path / NAME).iterdir() if p.name.startswith(".")]
    assert leftovers == []
