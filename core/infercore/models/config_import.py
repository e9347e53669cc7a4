"""Reading a model's config without transformers' model registry.

A transformers config class needs only ``configuration_utils``, yet some transformers releases import far
more while defining one: in 5.17 the ``auto_docstring`` decorator of every config class looks up example
pipelines in ``transformers.models.auto.modeling_auto``, which imports ``auto_factory``, then
``generation`` (scikit-learn through its candidate generator, ``torch._dynamo`` through its masks) and
the distributed loading helpers (``torch.distributed.tensor``, accelerate): seconds of start-up for a
docstring's example section. The decorator skips a registry that fails to import, so while the engine
reads a config, :func:`without_model_registry` refuses that one module to the reading thread; it is
imported as usual by whoever needs it later (``AutoModel``, ``AutoTokenizer``).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType

#: The module a config never needs: transformers' registry of model classes (and all it imports).
MODEL_REGISTRY = "transformers.models.auto.modeling_auto"


class _RefuseModule(importlib.abc.MetaPathFinder):
    """Refuses one module to one thread's imports (other threads import it as usual)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.thread = threading.get_ident()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.name and threading.get_ident() == self.thread:
            raise ModuleNotFoundError(f"{fullname} is not imported while a model config is read", name=fullname)
        return None


@contextlib.contextmanager
def without_model_registry() -> Iterator[None]:
    """Within the block, this thread can't import transformers' model registry (see the module's doc);
    nothing changes where the registry is already imported."""
    if MODEL_REGISTRY in sys.modules:
        yield
        return
    finder = _RefuseModule(MODEL_REGISTRY)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def refused_registry(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception behind it) is the refusal of :func:`without_model_registry`: a
    transformers release whose config code needs the registry, so the config is read again with it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ImportError) and current.name == MODEL_REGISTRY:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
