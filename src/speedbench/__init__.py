"""speedbench: benchmarking speculative decoding in LLM inference."""

__version__ = "0.1.0"
