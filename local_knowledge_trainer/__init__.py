"""Local Knowledge Trainer: hybrid RAG over a local document collection, with statistics on how good the base is.

    from local_knowledge_trainer import KnowledgeTrainer     # the product
    from local_knowledge_trainer import KnowledgeBase        # the index layer the analyses take

Hand-written (no notebook exports here; nbdev_export only rewrites the `__version__` line below). The names are resolved
lazily (PEP 562): `import local_knowledge_trainer` imports no submodule, and neither torch, sentence_transformers, spacy
nor scipy is imported until a model or an analysis needs it (tests/test_layers.py checks this).
"""
__version__ = "0.1.0"

from typing import TYPE_CHECKING as _TYPE_CHECKING

__all__ = ["KnowledgeBase", "KnowledgeTrainer"]

if _TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from .index import KnowledgeBase
    from .trainer import KnowledgeTrainer


def __getattr__(name):
    "Import `KnowledgeTrainer` / `KnowledgeBase` from their modules on first use (PEP 562)."
    if name == "KnowledgeTrainer": from .trainer import KnowledgeTrainer as obj
    elif name == "KnowledgeBase": from .index import KnowledgeBase as obj
    else: raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = obj            # later look-ups skip __getattr__
    return obj


def __dir__(): return sorted(set(globals()) | set(__all__))
