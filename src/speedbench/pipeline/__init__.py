"""The DVC pipeline's file contract and the verdict against a committed reference.

``stages`` maps params.yaml sections to sweep configs and sweep summaries to the stage metrics
files (``acceptance.json``, ``throughput.json``, ``oracle.json``, ``provenance.json``) in the
results schema; ``verify`` judges a fresh run's acceptance against a reference, figure by figure.
"""
