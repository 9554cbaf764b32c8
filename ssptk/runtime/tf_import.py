"""Importing TensorFlow in a task without the Keras 3 it loads for nothing.

``import tensorflow`` (2.16 and later) ends by importing ``keras.src.optimizers`` eagerly, only so that Keras 3
registers its optimizers for SavedModel loading. That pulls in all of Keras 3 (its ``keras/__init__`` loads
``keras._tf_keras``, its layers, and scikit-learn through a wrapper), matplotlib and IPython: refusing only
``keras.src.optimizers`` came too late, after ``keras`` itself had loaded all that. Refusing ``keras`` to that one
import (not to TensorFlow's ``find_spec`` lookups of where Keras lies) takes ``import tensorflow`` in a task from
5.3 s to 3.9 s on this project's 2-core machines (docs/tf-notes.md; every task of every run pays it). A task never
uses Keras 3 (models build into a graph, which Keras 3 cannot; the ``keras`` seed model is ``tf_keras``), and a
model that does import ``keras`` still gets all of it, registrations included, when it does.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["skip_eager_keras"]

EAGER_KERAS = "keras.src.optimizers"
#: the package (importing the submodule starts with it, and loads everything), and the submodule itself for a process
#: that had already imported ``keras``
SKIPPED = ("keras", EAGER_KERAS)


class _SkipEagerKeras(importlib.abc.MetaPathFinder):
    """Refuses ``keras`` and ``keras.src.optimizers`` to TensorFlow's ``__init__`` only (TensorFlow ignores the
    ImportError); anyone else importing them gets them."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in SKIPPED and _imported_by_tensorflow_init():
            raise ImportError(f"ssptk: {fullname} is not loaded with tensorflow in a task")
        return None


def _imported_by_tensorflow_init() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "get_parent_dir_for_name":  # TensorFlow only asks where Keras lies
            return False
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "tensorflow":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def skip_eager_keras() -> None:
    """Make a later ``import tensorflow`` in this process skip its eager import of Keras 3 (tasks only: a
    user's kernel keeps TensorFlow's behaviour). Does nothing once TensorFlow is imported, or where
    ``SSPTK_EAGER_KERAS=1`` asks for TensorFlow's own behaviour."""
    if os.environ.get("SSPTK_EAGER_KERAS") == "1" or "tensorflow" in sys.modules:
        return
    if any(isinstance(f, _SkipEagerKeras) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _SkipEagerKeras())
