"""Thin pytest wrapper: every notebook in nbs/ and evals/ is one pytest case run by `nbdev_test`.

Set LKT_SLOW=1 to also run the cells flagged `#| slow` (nbdev's `--flags slow`).
"""
import os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIRS = [ROOT / "nbs", ROOT / "evals"]
NOTEBOOKS = sorted(p for d in NB_DIRS for p in d.rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("_"))
NBDEV_TEST = Path(sys.executable).parent / "nbdev_test"


def test_notebooks_found():
    "The suite must never pass vacuously: nbs/ holds the numbered notebooks."
    numbered = [p for p in NOTEBOOKS if p.parent.name == "nbs" and p.name[:2].isdigit()]
    assert len(numbered) >= 2, f"expected numbered notebooks in {ROOT/'nbs'}, found {[p.name for p in NOTEBOOKS]}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_notebook(nb):
    "Run one notebook with nbdev_test; its output is shown when it fails."
    cmd = [str(NBDEV_TEST), "--path", str(nb), "--n_workers", "0", "--do_print"]
    if os.environ.get("LKT_SLOW"): cmd += ["--flags", "slow"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
           "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"nbdev_test failed on {nb.name}:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
    assert "Success" in (r.stdout + r.stderr), f"nbdev_test ran no notebook for {nb.name}:\n{r.stdout}\n{r.stderr}"
