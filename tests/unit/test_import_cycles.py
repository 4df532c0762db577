"""No import cycles inside src/speedbench, deferred imports included."""

from pathlib import Path

from scripts.import_cycles import cycles, forbidden_imports, import_graph

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_has_no_import_cycle_and_never_imports_the_orchestration_layer():
    assert cycles(import_graph(ROOT / "src")) == []
    assert forbidden_imports(ROOT / "src") == []


def test_an_import_of_prefect_or_of_tasks_in_the_core_is_found(tmp_path):
    pkg = tmp_path / "speedbench"
    (pkg / "run").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "run" / "__init__.py").write_text("")
    (pkg / "run" / "a.py").write_text("def f():\n    from prefect import task\n    return task\n")
    (pkg / "run" / "b.py").write_text("import tasks.tracking\nimport prefecture\n")
    assert forbidden_imports(tmp_path) == [
        ("speedbench.run.a", "prefect"),
        ("speedbench.run.a", "prefect.task"),
        ("speedbench.run.b", "tasks.tracking"),
    ]


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    pkg = tmp_path / "speedbench"
    (pkg / "client").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "client" / "__init__.py").write_text("")
    (pkg / "client" / "a.py").write_text("from speedbench.client.b import B\n")
    (pkg / "client" / "b.py").write_text(
        "def f():\n    from speedbench.client import a\n    return a\n"
    )
    only_for_types = "if TYPE_CHECKING:\n    from speedbench.client.a import A\n"
    (pkg / "client" / "c.py").write_text("from typing import TYPE_CHECKING\n" + only_for_types)
    (pkg / "client" / "d.py").write_text("from . import c\n")  # relative, one way: no cycle
    assert cycles(import_graph(tmp_path)) == [["speedbench.client.a", "speedbench.client.b"]]


def test_the_repository_root_is_the_checkout_wherever_a_module_moves():
    # A module that found the root by counting parent folders wrote its cache into src/ once
    # it moved a folder deeper; every path below the checkout now hangs from one REPO_ROOT.
    from speedbench import REPO_ROOT
    from speedbench.engines.base import DEFAULT_ENGINE_PYTHON
    from speedbench.engines.llamacpp import DEFAULT_SERVER
    from speedbench.provision.pypi import CACHE_ROOT

    assert REPO_ROOT == ROOT and (ROOT / "pyproject.toml").exists()
    assert CACHE_ROOT == ROOT / ".cache"
    assert DEFAULT_ENGINE_PYTHON == ROOT / ".venv-engine" / "bin" / "python"
    assert DEFAULT_SERVER == ROOT / ".llama.cpp" / "bin" / "llama-server"
