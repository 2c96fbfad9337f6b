"""The engine/UI boundary: the TUI never imports JAX & co; the engine never imports textual."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("jax", "jaxlib", "gemma", "keras", "keras_hub", "tensorflow", "flax", "orbax")


def _modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tui_start_up_imports_no_ml_framework():
    code = (
        "import importlib, pkgutil, workbench\n"
        "import workbench.cli\n"
        "for m in pkgutil.walk_packages(workbench.__path__, 'workbench.'):\n"
        "    if m.name.endswith('__main__'):\n"
        "        continue\n"
        "    importlib.import_module(m.name)\n"
    )
    loaded = _modules_after(code)
    heavy = sorted({m.split(".")[0] for m in loaded} & set(HEAVY))
    assert heavy == [], f"importing workbench pulled in {heavy}"


def test_engine_package_imports_no_textual():
    loaded = _modules_after("import adapters_lib, adapters_lib.config, adapters_lib.paths")
    assert not any(m == "textual" or m.startswith("textual.") for m in loaded)
    assert not any(m == "workbench" or m.startswith("workbench.") for m in loaded)


def test_engine_modules_never_import_textual_or_workbench():
    code = (
        "import importlib, pkgutil, adapters_lib\n"
        "for m in pkgutil.walk_packages(adapters_lib.__path__, 'adapters_lib.'):\n"
        "    if m.name.endswith('__main__'):\n"
        "        continue\n"
        "    importlib.import_module(m.name)\n"
    )
    loaded = _modules_after(code)
    bad = [m for m in loaded if m.split(".")[0] in ("textual", "workbench")]
    assert bad == []


def test_api_module_imports_no_jax_aiohttp_or_textual():
    loaded = _modules_after("import adapters_lib.engine.api")
    bad = sorted({m.split(".")[0] for m in loaded} & {*HEAVY, "aiohttp", "textual", "numpy"})
    assert bad == [], f"the API types pulled in {bad}"


def test_static_import_contracts_hold():
    """The import-linter contracts of .importlinter (every code path, not only start-up)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache", "--no-logo", str(root / ".importlinter")],
                         capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _import_circles() -> list[list[str]]:
    """Strongly connected sets of files: every import statement counts (function-level and
    ``TYPE_CHECKING`` ones, and imports of a package's ``__init__``)."""
    import grimp

    graph = grimp.build_graph("adapters_lib", "workbench", "themes", "bench", cache_dir=None,
                              exclude_type_checking_imports=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan, iterative enough for this graph's depth
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in graph.modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def test_no_file_imports_itself_through_others():
    """No import circle between files anywhere in the house."""
    assert _import_circles() == []


def test_the_lazy_packages_load_a_face_on_first_use():
    """models.gguf, models.quantize, models.hf, lora and memory: importing one loads none of its
    modules (a cached GGUF header comes back without numpy, the quantized layout and the TUI's
    LoRA count without JAX), and each name its ``__init__`` lists is its module's own object."""
    import importlib

    from adapters_lib.lazy_face import faces

    packages = ("adapters_lib.models.gguf", "adapters_lib.models.quantize", "adapters_lib.models.hf",
                "adapters_lib.lora", "adapters_lib.memory")
    loaded = _modules_after("import " + ", ".join(packages))
    assert [m for m in loaded if m.startswith(tuple(p + "." for p in packages))] == []
    assert not {"numpy", "gguf", *HEAVY} & {m.split(".")[0] for m in loaded}
    for package in packages:
        face = importlib.import_module(package)
        table = faces(package)
        assert table and set(table) <= set(dir(face))
        for name, (module, attribute) in table.items():
            assert getattr(face, name) is getattr(importlib.import_module(f"{package}.{module}"), attribute)
