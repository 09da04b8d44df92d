"""The Ray engine gives the local engine's results: a local Ray cluster (`ray.init(num_cpus=2)`, no dashboard) parses and
embeds a small folder through `cluster.ray_documents`, and the chunk ids, texts, vectors (within 1e-5) and per-file
failures are the local path's; through the trainer, `ingest(engine="ray")` and `ingest(engine="local")` give the same
store, the same vectors and the same answers, and a re-run changes nothing.

Skipped cleanly without the extra (`pip install "local_knowledge_trainer[cluster]"`). Ray starts once for the module
(10–20 s on 2 cores) and is shut down after it; each Ray Data run then costs a few seconds (actor start, model load).
"""
import inspect, os, shutil
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason='the cluster extra is not installed: pip install "local_knowledge_trainer[cluster]"')
pytest.importorskip("ray.data", reason='Ray Data is missing: pip install "local_knowledge_trainer[cluster]"')

from local_knowledge_trainer.cluster import ray_documents
from local_knowledge_trainer.embeddings import Embedder, HashingBackend, ModelNotInstalledError, resolve_backend
from local_knowledge_trainer.parser import DocumentParser

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "evals" / "sample_corpus"
KW = dict(chunk_size=60, chunk_overlap=10)   # small chunks: several per file, so embedding batches straddle documents
QUESTIONS = ["How does LKT combine BM25 and dense retrieval?", "At what temperature are coffee beans roasted?",
             "Which Java class handles orders?", "What does the solar report measure?", "How is green tea processed?"]


@pytest.fixture(scope="module")
def local_ray():
    "A local Ray of 2 CPUs for the module (an already running Ray is used as it is, and left running)."
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started: ray.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    "The sample corpus, plus a .pdf that is not a PDF (fails), an empty file (skipped) and a symbolic link to a file (a repeat)."
    d = tmp_path_factory.mktemp("cluster") / "corpus"
    shutil.copytree(SAMPLE, d)
    (d / "broken.pdf").write_text("this is not a PDF, whatever its name says")
    (d / "notes" / "empty.txt").write_text("")
    (d / "zz_link.md").symlink_to(d / "docs" / "lkt_overview.md")
    return d


def _minilm():
    try: return resolve_backend("all-MiniLM-L6-v2")
    except ModelNotInstalledError as e: pytest.skip(str(e))


@pytest.mark.parametrize("make_backend", [lambda: HashingBackend(64), _minilm], ids=["hashing-64", "all-MiniLM-L6-v2"])
def test_ray_documents_match_the_local_path(local_ray, folder, make_backend):
    "Per file, in order: the local parser's Document (ids, texts, status, reason) and Embedder.embed_chunks' vectors."
    backend = make_backend()
    pairs = DocumentParser(**KW).list_files(folder)
    got = list(ray_documents(pairs, KW, backend, batch_size=8))
    local = list(DocumentParser(**KW).parse_files(pairs))
    emb = Embedder(backend, threads=1)
    assert [d.source for d, _ in got] == [s for _, s in pairs]
    for (d, X), l in zip(got, local):
        assert [(c.id, c.text) for c in d.chunks] == [(c.id, c.text) for c in l.chunks], d.source
        assert (d.status, d.reason, d.content_hash) == (l.status, l.reason, l.content_hash), d.source
        assert d == l, d.source                                          # every field, of the document and its chunks
        if not (l.ok and l.chunks):
            assert X is None, d.source; continue
        assert X.dtype == np.float32 and X.shape == (len(l.chunks), emb.dim), (d.source, X.shape)
        np.testing.assert_allclose(X, emb.embed_chunks(l.chunks), atol=1e-5, rtol=0, err_msg=d.source)
        np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1, atol=1e-5)
    by = {d.source.rsplit("/", 1)[-1]: d for d, _ in got}
    assert by["broken.pdf"].status == "failed" and "PDF" in by["broken.pdf"].reason, by["broken.pdf"]
    assert (by["empty.txt"].status, by["empty.txt"].reason) == ("skipped", "empty file (0 bytes)")
    assert by["zz_link.md"].status == "skipped" and "symbolic link" in by["zz_link.md"].reason, by["zz_link.md"]
    assert sum(len(d.chunks) for d, _ in got) == sum(len(d.chunks) for d in local) > 40


def test_known_documents_are_parsed_not_embedded(local_ray, folder):
    "`known` (source -> stored content hash): such a document comes back parsed with vectors None; a stale hash is embedded."
    pairs = DocumentParser(**KW).list_files(folder)
    local = {d.source: d for d in DocumentParser(**KW).parse_files(pairs)}
    md, py = next(s for s in local if s.endswith("lkt_overview.md")), next(s for s in local if s.endswith("inventory.py"))
    got = {d.source: (d, X) for d, X in ray_documents(pairs, KW, HashingBackend(64), known={md: local[md].content_hash, py: "0" * 64})}
    assert got[md][1] is None and got[md][0] == local[md]
    assert got[py][1] is not None and got[py][1].shape == (len(local[py].chunks), 64)


def _has_engine():
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    return "engine" in inspect.signature(KnowledgeTrainer.ingest).parameters


def test_trainer_ray_ingest_equals_local(local_ray, folder, tmp_path):
    "ingest(engine='ray') and ingest(engine='local') give the same chunk ids, vectors and top-5 answers; a re-run changes nothing."
    if not _has_engine(): pytest.skip("KnowledgeTrainer.ingest has no `engine` parameter yet (the trainer's Ray hook)")
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    make = lambda name: KnowledgeTrainer(embedding_model=Embedder(HashingBackend(64)), persist_dir=tmp_path / name,
                                         build_graph=False, warm=False)
    kr, kl = make("a"), make("b")                                        # same parent: the same source names
    rr, rl = kr.ingest(folder, engine="ray", **KW), kl.ingest(folder, engine="local", **KW)
    assert sorted(map(str, rr.errors)) == sorted(map(str, rl.errors)) and len(rr.errors) == 1, (rr.errors, rl.errors)
    assert [e["reason"] for e in rr.errors] == [e["reason"] for e in rl.errors]
    assert sorted(map(str, rr.skipped)) == sorted(map(str, rl.skipped)) and len(rr.skipped) == 1, rr.skipped
    assert rr.skipped[0]["reason"] == "empty file (0 bytes)", rr.skipped
    # a persisted base names the link by its target's canonical source, so `_files_of` lists that source once: the link
    # is neither parsed nor reported (ray_documents, given both pairs, skips it: test_ray_documents_match_the_local_path)
    files = [f for f in folder.rglob("*") if f.is_file() and not f.is_symlink()]
    assert rr.total_docs == rl.total_docs == len(files), (rr.total_docs, rl.total_docs, len(files))
    assert rr.chunks == rl.chunks > 40
    assert kr.embedder.backend.n_encoded == 0 < kl.embedder.backend.n_encoded   # ray: every vector came from the actors
    ids = sorted(kr.store.chunk_ids())
    assert ids == sorted(kl.store.chunk_ids()) and len(ids) == rr.chunks
    np.testing.assert_allclose(kr.kb.vectors_of(ids), kl.kb.vectors_of(ids), atol=1e-5, rtol=0)
    for q in QUESTIONS:
        assert [c.id for c in kr.query(q, k=5).source_chunks] == [c.id for c in kl.query(q, k=5).source_chunks], q
    cache_rows, store_ids = len(kr.embedder.cache), sorted(kr.store.chunk_ids())
    again = kr.ingest(folder, engine="ray", **KW)
    assert again.chunks == 0 and sorted(again.unchanged) == sorted(rr.approved_docs), again
    assert sorted(kr.store.chunk_ids()) == store_ids
    assert len(kr.embedder.cache) == cache_rows
