"""speedbench: benchmarking speculative decoding in LLM inference."""

from pathlib import Path

__version__ = "0.1.0"

# The checkout speedbench runs from (it is installed editable): where its caches (.cache/), the
# engine environments (.venv-engine/) and the local llama-server build (.llama.cpp/) live.
REPO_ROOT = Path(__file__).resolve().parents[2]
