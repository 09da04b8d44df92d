"""Shared pytest set-up: run order, and what the notebook tests tell the docs tests.

Order: tests/test_layers.py (seconds), then tests/test_notebooks.py (each notebook executed once, saved with its
outputs to build/executed/), then everything else, and tests/test_docs.py last — its site fixture renders the
executed copies instead of executing the notebooks a second time.

One cache for the session: LKT_CACHE_DIR (the int8 E5 encoder built once, measured thread counts, BEIR and eval vectors)
is build/lkt-cache unless it is set already, so every notebook and test process shares it and none writes into the
user's ~/.cache/lkt.
"""
import importlib.util, os, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = {"test_layers.py": 0, "test_notebooks.py": 1, "test_docs.py": 9}
CACHE = ROOT / "build" / "lkt-cache"   # the session's LKT_CACHE_DIR unless one is set (build/ is git-ignored)


def docs_build():
    "nbs/_docs/build.py as a module (the notebook executor and the docs build share it), loaded once."
    name = "lkt_docs_build"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "nbs" / "_docs" / "build.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def pytest_configure(config):
    "The `slow` marker (tests that take minutes: `make test` deselects them, `make test-slow` runs them), and the session's LKT_CACHE_DIR."
    config.addinivalue_line("markers", "slow: takes minutes (the kill loop, big simulations); run by `make test-slow`, not `make test`")
    os.environ.setdefault("LKT_CACHE_DIR", str(CACHE))   # before the test modules are imported: they copy os.environ for their processes


def pytest_collection_modifyitems(session, config, items):
    "Notebooks before the docs, whatever order the files were given in (a stable sort keeps the order inside a file)."
    items.sort(key=lambda item: ORDER.get(item.path.name, 5))


def pytest_generate_tests(metafunc):
    "A test taking `notebook` runs once per notebook of nbs/ and evals/ (the docs build's list: nbdev's skip rules)."
    if "notebook" in metafunc.fixturenames:
        nbs = docs_build().notebooks()
        metafunc.parametrize("notebook", nbs, ids=[p.relative_to(ROOT).as_posix() for p in nbs])


@pytest.fixture(scope="session")
def build():
    "The nbs/_docs/build.py module."
    return docs_build()


@pytest.fixture(scope="session")
def notebook_runs():
    "{notebook path relative to the repo: passed?} for every notebook tests/test_notebooks.py executed in this session."
    return {}
