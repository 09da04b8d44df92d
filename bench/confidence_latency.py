"""What a confidence costs above the search itself, for k from 1 to 50, on a base of about 10,000 chunks.

Prints ONE JSON object. The base: CISI and CACM abstracts (../shared/data) cut into chunks of two sentences (about
10k chunks), embedded with the hashing stand-in (`embeddings.HashingEmbedder`, 384 dimensions): the confidence's cost
does not depend on the model once the question is encoded, and the question's vector is the one the search computed.
The models are fitted once (what a writer does at publish); then 200 seeded questions (the 128 judged queries of both
collections, each about twice with another k) are searched with k = 1 + i % 50, and for each the time of `kb.search` and of `answer_confidence` on its
response (features, calibration, p-value) is taken. Reported: p50/p95 of each, and of the ratio confidence / search.

  .venv/bin/python bench/confidence_latency.py [--data ../shared/data]
"""
import argparse, json, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0]); ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    a = ap.parse_args()
    import numpy as np
    from local_knowledge_trainer.beir import load_beir
    from local_knowledge_trainer.core import Chunk
    from local_knowledge_trainer.text import sentence_spans
    from local_knowledge_trainer.embeddings import HashingEmbedder
    from local_knowledge_trainer.index import KnowledgeBase
    from local_knowledge_trainer.probes import content_seed
    from local_knowledge_trainer import confidence as C
    chunks, qs = [], []
    for name in ("cisi", "cacm"):
        corpus, queries, _ = load_beir(Path(a.data) / name)
        qs += list(queries.values())
        for i, d in corpus.items():
            text = (d["title"] + ". " + d["text"]).strip(); sp = sentence_spans(text)
            for j in range(0, max(len(sp), 1), 2):
                part = text[sp[j][0]:sp[min(j + 1, len(sp) - 1)][1]] if sp else text
                if part.strip(): chunks.append(Chunk(id=f"{name}-{i}-{j}", text=part, source=f"{name}/{i}"))
    emb = HashingEmbedder(384)
    kb = KnowledgeBase.from_chunks(chunks, emb)
    t = time.perf_counter(); C.fit_confidence_models(kb); fit = time.perf_counter() - t
    pick = [qs[i % len(qs)] for i in np.random.default_rng(content_seed(*qs)).permutation(200)]   # 128 judged queries, each about twice
    s_ms, c_ms = [], []
    for i, q in enumerate(pick):
        k = 1 + i % 50
        t = time.perf_counter(); got, trace = kb.search(q, k=k); t1 = time.perf_counter()
        C.answer_confidence(kb, C.QueryResponse("", source_chunks=got, question=q, trace=dict(trace)), k=k); t2 = time.perf_counter()
        s_ms.append((t1 - t) * 1000); c_ms.append((t2 - t1) * 1000)
    s_ms, c_ms = np.array(s_ms), np.array(c_ms)
    q = lambda x, p: round(float(np.quantile(x, p)), 2)
    print(json.dumps({"bench": "confidence_latency", "chunks": len(kb), "questions": len(pick), "k": "1..50", "fit_s": round(fit, 1),
                      "search_ms": {"p50": q(s_ms, .5), "p95": q(s_ms, .95)}, "confidence_ms": {"p50": q(c_ms, .5), "p95": q(c_ms, .95)},
                      "confidence_over_search": {"p50": q(c_ms / s_ms, .5), "p95": q(c_ms / s_ms, .95)}}))


if __name__ == "__main__":
    main()
