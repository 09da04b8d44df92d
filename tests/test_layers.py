"""The library's layers point one way, every module imports on its own, and the product's import and `lkt --help` are light.

LAYERS lists the modules of local_knowledge_trainer/ bottom to top. A module may import (at module level or deferred
inside a function, `importlib.import_module("…")` included) only modules below it; `hypothesis` and the statistics modules split
from it (STATS) are pure statistics and may import only `core`, `text` and each other downward. A module missing from LAYERS is an error, so the list stays up to date when a module
is added, split or removed. `_modidx` (nbdev's index) is not a layer; the package `__init__` is hand-written and checked
separately: it must import no submodule eagerly (PEP 562 lazy names).
"""
import ast, json, os, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = "local_knowledge_trainer"
PKG = ROOT / LIB
LAYERS = ["core", "layout", "llm", "text", "chunking", "decoding", "readers", "parser", "store_schema", "filters",
          "okapi", "fts", "store", "persist", "folder", "e5", "embedding_cache", "embeddings", "vector_base",
          "vector_store", "lexical", "bm25_files", "retrieval", "index", "stat_results", "effect_sizes",
          "distributions", "signflip", "bootstrap", "multiple_testing", "anova", "contingency", "power", "hypothesis",
          "golden", "runs", "beir", "entities", "align", "graph", "claims", "probes", "fusion", "gate",
          "answer_features", "confidence", "diagnostics", "cluster", "answer", "manifest", "sources", "ingest",
          "doctor", "feedback", "forward", "writing", "graph_upkeep", "trainer", "watch", "output", "serve_models",
          "serve_guard", "serve_service", "serve", "cli_config", "cli_client", "cli_render", "cli_commands", "cli"]
STATS = ["stat_results", "effect_sizes", "distributions", "signflip", "bootstrap", "multiple_testing", "anova",
         "contingency", "power", "hypothesis"]          # pure statistics: `core`, `text` and each other downward
ONLY = {m: {"core", "text", *STATS[:i]} for i, m in enumerate(STATS)}   # stricter than "anything below"
NOT_LAYERS = {"_modidx", "__init__"}
LAZY = {"KnowledgeTrainer": "trainer", "KnowledgeBase": "index"}   # names the package resolves lazily (__init__.py)
MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem not in NOT_LAYERS)
HEAVY_PRODUCT = ["torch", "sentence_transformers", "spacy", "scipy"]
HEAVY_CLI = HEAVY_PRODUCT + ["sklearn", "pandas", "faiss", "detect_secrets"]   # detect_secrets: output.redact imports it on first use
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}


# ---------------------------------------------------------------------------------------------------- static layers
def lib_imports(path: Path):
    "[(imported library module, line, deferred?)] for every import of the library in `path`, at any depth."
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []

    def add(target, node, deferred):
        parts = target.split(".")
        if parts[0] != LIB: return
        if len(parts) > 1: found.append((parts[1], node.lineno, deferred))

    def names_of_package(node, deferred):          # `from local_knowledge_trainer import x, KnowledgeTrainer`
        for a in node.names:
            if (PKG / f"{a.name}.py").exists() or a.name in LAYERS: found.append((a.name, node.lineno, deferred))
            elif a.name in LAZY: found.append((LAZY[a.name], node.lineno, deferred))

    def visit(node, deferred):
        for child in ast.iter_child_nodes(node):
            d = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names: add(a.name, child, d)
            elif isinstance(child, ast.ImportFrom):
                if child.level == 1: base = LIB + (f".{child.module}" if child.module else "")
                elif child.level == 0: base = child.module or ""
                else: base = ""
                if base == LIB: names_of_package(child, d)
                else: add(base, child, d)
            elif isinstance(child, ast.Call):           # importlib.import_module("local_knowledge_trainer.x") / (".x", …)
                f = child.func
                fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if fname in ("import_module", "__import__") and child.args and isinstance(child.args[0], ast.Constant) \
                        and isinstance(child.args[0].value, str):
                    s = child.args[0].value
                    add(LIB + s if s.startswith(".") else s, child, d)
            visit(child, d)

    visit(tree, False)
    return found


def test_every_module_is_in_the_layer_order():
    "Each module of the package has a place in LAYERS (add a new module there, below everything that imports it)."
    missing = [m for m in MODULES if m not in LAYERS]
    assert not missing, f"modules not in tests/test_layers.py LAYERS: {missing}; order is {' → '.join(LAYERS)}"


def test_layer_order_names_existing_modules():
    "LAYERS names no module that does not exist (remove it from the list when a module goes away)."
    gone = [m for m in LAYERS if m not in MODULES]
    assert not gone, f"LAYERS names modules that are not in {LIB}/: {gone}"


@pytest.mark.parametrize("mod", MODULES)
def test_imports_point_down(mod):
    "No import of a module at or above this one in LAYERS, at module level or deferred inside a function."
    assert mod in LAYERS, f"{mod} is not in LAYERS (see test_every_module_is_in_the_layer_order)"
    rank = LAYERS.index(mod)
    bad = []
    for target, line, deferred in lib_imports(PKG / f"{mod}.py"):
        if target == mod: continue
        where = f"{mod}.py:{line} imports {target}" + (" (deferred, inside a function)" if deferred else "")
        if target not in LAYERS: bad.append(f"{where}, which is not in LAYERS")
        elif mod in ONLY and target not in ONLY[mod]: bad.append(f"{where}; {mod} may import only {sorted(ONLY[mod])}")
        elif LAYERS.index(target) > rank: bad.append(f"{where}, which is above it")
    assert not bad, "upward imports:\n" + "\n".join(bad) + f"\norder (bottom → top): {' → '.join(LAYERS)}"


def _eager_lib_imports(nodes):
    "Line numbers of library imports that run when these statements run (function bodies and TYPE_CHECKING skipped)."
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)): continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _eager_lib_imports(node.orelse); continue
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == LIB): yield node.lineno
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == LIB for a in node.names): yield node.lineno
        else: yield from _eager_lib_imports(ast.iter_child_nodes(node))


def test_package_init_is_lazy():
    "The package __init__ imports no submodule at import time (only inside `__getattr__`, or under TYPE_CHECKING)."
    src = (PKG / "__init__.py").read_text(encoding="utf-8")
    eager = list(_eager_lib_imports(ast.parse(src).body))
    assert not eager, f"__init__.py imports submodules eagerly at lines {eager}"
    assert len(re.findall(r'^__version__ = "[^"]+"$', src, re.M)) == 1, "keep nbdev's one `__version__ = \"x.y.z\"` line"
    for name, mod in LAZY.items():
        assert f"from .{mod} import {name}" in src, f"__init__.py must resolve {name} from .{mod}"


# ------------------------------------------------------------------------------------------------- dynamic imports
def _py(code, *flags):
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True)


@pytest.fixture(scope="module")
def alone():
    "`python -c 'import local_knowledge_trainer.X'` for every module, each in its own process, a few at a time."
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        runs = dict(zip(MODULES, ex.map(lambda m: _py(f"import {LIB}.{m}"), MODULES)))
    return runs


@pytest.mark.parametrize("mod", MODULES)
def test_module_imports_on_its_own(mod, alone):
    "Each module imports in a fresh interpreter without anything imported before it."
    r = alone[mod]
    assert r.returncode == 0, f"`python -c 'import {LIB}.{mod}'` failed:\n{r.stderr[-4000:]}"


_REPORT = "import json, sys; print('LKT-MODULES ' + json.dumps(sorted(sys.modules)))"


def _modules(r):
    line = next((l for l in r.stdout.splitlines() if l.startswith("LKT-MODULES ")), None)
    assert r.returncode == 0 and line, f"exit {r.returncode}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-4000:]}"
    return set(json.loads(line[len("LKT-MODULES "):]))


def _heavy(mods, names): return sorted(n for n in names if n in mods)


def test_package_import_is_light():
    "`import local_knowledge_trainer` imports no submodule of it, and none of the heavy libraries."
    mods = _modules(_py(f"import {LIB}\n" + _REPORT))
    assert not [m for m in mods if m.startswith(LIB + ".")], sorted(m for m in mods if m.startswith(LIB + "."))
    assert not _heavy(mods, HEAVY_CLI), f"`import {LIB}` imported {_heavy(mods, HEAVY_CLI)}"


def test_product_import_is_light():
    "`from local_knowledge_trainer import KnowledgeTrainer` works and leaves torch, sentence_transformers, spacy, scipy out."
    code = (f"import {LIB}\nfrom {LIB} import KnowledgeTrainer\n"
            f"assert KnowledgeTrainer.__module__ == '{LIB}.trainer', KnowledgeTrainer.__module__\n"
            f"assert 'KnowledgeTrainer' in dir({LIB}) and 'KnowledgeBase' in dir({LIB})\n"
            f"assert {LIB}.KnowledgeTrainer is KnowledgeTrainer\n"
            f"try: {LIB}.no_such_name\nexcept AttributeError: pass\nelse: raise SystemExit('no AttributeError')\n" + _REPORT)
    mods = _modules(_py(code))
    assert not _heavy(mods, HEAVY_PRODUCT), f"`from {LIB} import KnowledgeTrainer` imported {_heavy(mods, HEAVY_PRODUCT)}"


def test_knowledge_base_is_exported():
    "`from local_knowledge_trainer import KnowledgeBase` gives the index layer's class."
    r = _py(f"from {LIB} import KnowledgeBase; assert KnowledgeBase.__module__ == '{LIB}.index', KnowledgeBase.__module__")
    assert r.returncode == 0, r.stderr[-4000:]


def test_cli_help_is_instant():
    "`lkt --help` (cli.main(['--help'])) prints the usage and imports none of the heavy libraries."
    code = (f"import sys\nfrom {LIB}.cli import main\ntry: main(['--help'])\nexcept SystemExit as e: code = e.code\n"
            f"else: code = 'no SystemExit'\nassert code in (0, None), code\n" + _REPORT)
    r = _py(code)
    mods = _modules(r)
    assert "usage:" in r.stdout and "ingest" in r.stdout, r.stdout[-2000:]
    assert not _heavy(mods, HEAVY_CLI), f"`lkt --help` imported {_heavy(mods, HEAVY_CLI)}"


def test_console_script_help():
    "The installed `lkt` console script answers --help with exit 0, and `-X importtime` shows no heavy import."
    lkt = Path(sys.executable).parent / "lkt"
    if not lkt.exists(): pytest.skip(f"no console script at {lkt} (pip install -e .)")
    r = subprocess.run([sys.executable, "-X", "importtime", str(lkt), "--help"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr[-4000:]
    imported = {l.split("|")[-1].strip() for l in r.stderr.splitlines() if l.startswith("import time:") and "|" in l}
    heavy = sorted({m.split(".")[0] for m in imported} & set(HEAVY_CLI))
    assert not heavy, f"`lkt --help` imported {heavy}"


# ---------------------------------------------------------------------------------------------------- module size
MAX_LINES, MAX_WIDTH = 800, 120      # issue 24's rules: split a module by idea before it passes 800 lines


@pytest.mark.parametrize("mod", MODULES)
def test_module_size(mod):
    "A module stays under MAX_LINES lines and MAX_WIDTH characters a line (nbdev's `__all__` excepted)."
    lines = (PKG / f"{mod}.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"{mod}.py has {len(lines)} lines (> {MAX_LINES}): split it by idea into a new notebook"
    wide = [i for i, l in enumerate(lines, 1) if len(l) > MAX_WIDTH and not l.startswith("__all__")]
    assert not wide, f"{mod}.py lines {wide} are wider than {MAX_WIDTH} characters: wrap them in the notebook"
