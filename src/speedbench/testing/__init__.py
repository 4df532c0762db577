"""Test doubles that speak the engines' own dialects (never a replacement for a real engine).

``synthetic`` is an HTTP server answering in vLLM's, SGLang's and TensorRT-LLM's wire formats
with scripted acceptance, timing and faults, for fault-injection and timing tests.
"""
