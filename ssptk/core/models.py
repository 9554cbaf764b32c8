"""Models: the two seed examples and the contract for user models.

A model is described by a :class:`ModelSpec`. A user model is any importable function
``package.module:function`` that takes no arguments and returns a ``ModelSpec``::

    import numpy as np
    import ssptk

    def my_model() -> ssptk.ModelSpec:
        def build():
            import tf_keras
            return tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(3,))])
        def loss(y, pred):
            import tensorflow as tf
            return tf.reduce_mean(tf.square(pred[:, 0] - y))
        def data(rng, batch):
            x = rng.normal(size=(batch, 3)).astype("float32")
            return x, (x @ np.array([1.0, -2.0, 0.5], "float32"))
        return ssptk.ModelSpec(build=build, loss=loss, data=data, lr=0.05)

The same spec runs in all four modes because ssptk, not the model, decides where variables live:
``build()`` is called inside the mode's placement scope (parameter-server placement for sync, ssp
and async; ``MultiWorkerMirroredStrategy.scope()`` for allreduce), in graph mode for the first three
and eagerly for allreduce. So ``build`` must create its variables with TensorFlow (``tf.Variable``,
``tf.Module`` or a ``tf_keras`` model, not a Keras 3 ``tf.keras`` one: Keras 3 cannot build into a
graph) and must not run anything; ``loss`` must be written with TensorFlow ops. ``data`` is plain
NumPy and is called with a generator seeded by ``(seed, minibatch index)``, so every minibatch is
the same in every mode and every run with that seed.
"""
from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssptk.core.errors import UsageError


@dataclass
class ModelSpec:
    """What ssptk needs to train a model in any mode.

    - ``build()``: create the variables and return a callable ``module(x) -> predictions`` that has
      ``trainable_variables`` (a ``tf.Module`` or a ``tf_keras`` model).
    - ``loss(y, predictions)``: a scalar TensorFlow tensor.
    - ``data(rng, batch)``: one minibatch ``(x, y)`` of NumPy arrays from ``rng`` (a ``numpy.random.Generator``).
    - ``lr``: the default learning rate of plain SGD for this model (and of momentum: ``--optimizer momentum:BETA``).
    - ``adam_lr`` (optional): the default learning rate of ``--optimizer adam`` (without it, 0.001, Kingma and Ba's).
    - ``eval_data()`` (optional): the held-out set ``(x, y)`` final models are evaluated on; without it, a
      fixed batch from ``data`` that no training step draws.
    - ``accuracy(y, predictions)`` (optional): a scalar TensorFlow tensor, the fraction classified right;
      reported as ``eval_accuracy`` (``null`` without it, e.g. for regression).
    - ``train_set()`` (optional): the whole training set ``(x, y)`` as arrays, for ``--data-split label``
      (worker i then draws its minibatches from the i-th of N slices of it sorted by ``y``).
    """

    build: Callable[[], Any]
    loss: Callable[[Any, Any], Any]
    data: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]
    lr: float = 0.05
    name: str = "model"
    eval_data: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
    accuracy: Callable[[Any, Any], Any] | None = None
    train_set: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
    adam_lr: float | None = None


def minibatch(spec: ModelSpec, seed: int, index: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Minibatch number ``index`` of a run with ``seed``: the same wherever and whenever it is computed."""
    return spec.data(np.random.default_rng([int(seed), int(index), 1]), batch)


def check_split(spec: ModelSpec, split: str, name: str) -> None:
    """:class:`UsageError` if ``--data-split split`` cannot be used with ``spec`` (called ``name``)."""
    if split != "iid" and spec.train_set is None:
        raise UsageError(f"--data-split {split} needs a model with train_set (its whole training set as arrays); "
                         f"{name} has none: use --model digits or add train_set= to its ModelSpec")


def data_source(spec: ModelSpec, seed: int, batch: int, split: str = "iid", worker: int = 0,
                workers: int = 1) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
    """``minibatch index -> (x, y)`` for ``worker`` of ``workers``. ``split="iid"``: :func:`minibatch`, the
    same batch whichever worker draws it; ``"label"``: drawn (seeded the same way) from the worker's slice of
    ``spec.train_set()`` sorted by label, so each worker sees only its own labels (non-IID data)."""
    if split == "iid":
        return lambda index: minibatch(spec, seed, index, batch)
    check_split(spec, split, spec.name)
    assert spec.train_set is not None
    x, y = spec.train_set()
    mine = np.array_split(np.argsort(np.asarray(y), kind="stable"), workers)[worker]

    def draw(index: int) -> tuple[np.ndarray, np.ndarray]:
        picked = mine[np.random.default_rng([int(seed), int(index), 1]).integers(0, len(mine), batch)]
        return x[picked], y[picked]

    return draw


def eval_batch(spec: ModelSpec, seed: int, size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation set final models are compared on: the model's held-out ``eval_data()``, else a fixed
    batch, disjoint from training minibatches."""
    if spec.eval_data is not None:
        return spec.eval_data()
    return spec.data(np.random.default_rng([int(seed), 2**31 - 1, 2]), size)


# --- linear: the second seed's y = w*x + b on y = 2x + 10 + N(0, 0.33^2) ---------------------------

def _linear_build() -> Any:
    import tensorflow as tf

    class Linear(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="linear")
            self.w = tf.Variable(0.0, name="w")
            self.b = tf.Variable(0.0, name="b")

        def __call__(self, x: Any) -> Any:
            return self.w * x + self.b

    return Linear()


def _mse(y: Any, pred: Any) -> Any:
    import tensorflow as tf

    return tf.reduce_mean(tf.square(pred - y))


def _linear_data(rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal(batch).astype(np.float32)
    y = (2.0 * x + 10.0 + rng.standard_normal(batch) * 0.33).astype(np.float32)
    return x, y


def linear() -> ModelSpec:
    """The blog seed's model. lr 0.05 converges in ~100 steps and stays stable under async staleness."""
    return ModelSpec(build=_linear_build, loss=_mse, data=_linear_data, lr=0.05, name="linear", adam_lr=0.05)


# --- keras: the first seed's Dense(2) on 5 features, labels from a fixed hidden teacher ------------

_TEACHER = np.random.default_rng(20240601).standard_normal((5, 2)).astype(np.float32)


def _keras_build() -> Any:
    import tf_keras

    return tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(5,), name="dense")], name="keras_dense2")


def _xent(y: Any, logits: Any) -> Any:
    import tensorflow as tf

    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def _keras_data(rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((batch, 5)).astype(np.float32)
    return x, np.argmax(x @ _TEACHER, axis=1).astype(np.int64)


def keras() -> ModelSpec:
    """The MultiWorkerMirroredStrategy page's ``Dense(2)``, with learnable labels."""
    return ModelSpec(build=_keras_build, loss=_xent, data=_keras_data, lr=0.2, name="keras", adam_lr=0.05)


# --- digits: a small MLP on scikit-learn's bundled 8x8 handwritten digits, where staleness costs something ----

#: Share of the 1797 digits held out for evaluation (a fixed, seeded split: the same in every run).
DIGITS_HELD_OUT = 0.2


@functools.lru_cache(maxsize=1)
def digits_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: pixels scaled to [0, 1]. Read from the CSV scikit-learn ships
    (``sklearn/datasets/data/digits.csv.gz``) without importing scikit-learn, which would cost each task ~2 s."""
    import importlib.util
    import os

    found = importlib.util.find_spec("sklearn")
    path = None if found is None or found.origin is None else \
        os.path.join(os.path.dirname(found.origin), "datasets", "data", "digits.csv.gz")
    if path is None or not os.path.exists(path):
        raise UsageError("model 'digits' needs scikit-learn's bundled digits: pip install scikit-learn")
    table = np.loadtxt(path, delimiter=",", dtype=np.float32)
    x, y = table[:, :64] / 16.0, table[:, 64].astype(np.int64)
    order = np.random.default_rng(1797).permutation(len(x))
    cut = int(round(len(x) * (1 - DIGITS_HELD_OUT)))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


def _digits_build() -> Any:
    import tf_keras

    return tf_keras.Sequential([tf_keras.layers.Dense(32, activation="tanh", input_shape=(64,), name="hidden"),
                                tf_keras.layers.Dense(10, name="logits")], name="digits_mlp")


def _digits_data(rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
    x, y, _, _ = digits_arrays()
    idx = rng.integers(0, len(x), batch)
    return x[idx], y[idx]


def _digits_train() -> tuple[np.ndarray, np.ndarray]:
    x, y, _, _ = digits_arrays()
    return x, y


def _digits_eval() -> tuple[np.ndarray, np.ndarray]:
    _, _, x, y = digits_arrays()
    return x, y


def _classified(y: Any, logits: Any) -> Any:
    import tensorflow as tf

    return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=1), tf.cast(y, tf.int64)), tf.float32))


def digits() -> ModelSpec:
    """An MLP (64 -> 32 tanh -> 10) on scikit-learn's 8x8 digits: 1438 training and 359 held-out images."""
    return ModelSpec(build=_digits_build, loss=_xent, data=_digits_data, lr=0.1, name="digits", adam_lr=0.01,
                     eval_data=_digits_eval, accuracy=_classified, train_set=_digits_train)


# --- mlp:WIDTH: the digits task at a size the user picks, to make communication cost something ----------

#: ``mlp`` without a width: 1.1 M parameters, 4.5 MB of float32 through the PS per pull and per push.
MLP_WIDTH = 1024
MLP_WIDTHS = (8, 4096)  # 1.2 k to 17 M parameters


def mlp_parameters(width: int) -> int:
    """Parameters of ``mlp:WIDTH`` (64 -> WIDTH -> WIDTH -> 10): ``WIDTH^2 + 76 WIDTH + 10``."""
    return 64 * width + width + width * width + width + 10 * width + 10


#: Each ``mlp`` layer's kernel is this many column blocks, each a variable: up to this many PS shards share it.
MLP_BLOCKS = 8


def _mlp_build(width: int) -> Any:
    import tensorflow as tf

    class BlockedMLP(tf.Module):
        """64 -> width -> width -> 10, tanh; each kernel kept as ``MLP_BLOCKS`` column blocks (a variable each),
        the same function as one matrix, so ``--ps K`` can spread a layer over K shards."""

        def __init__(self) -> None:
            super().__init__(name=f"mlp_{width}")
            self.layers = []
            for k, (fan_in, fan_out) in enumerate(((64, width), (width, width), (width, 10))):
                limit = (6.0 / (fan_in + fan_out)) ** 0.5  # Glorot uniform, as Keras' Dense
                cuts = [len(c) for c in np.array_split(np.arange(fan_out), min(MLP_BLOCKS, fan_out))]
                kernels = [tf.Variable(tf.random.uniform([fan_in, c], -limit, limit), name=f"dense{k}_kernel{j}")
                           for j, c in enumerate(cuts)]
                self.layers.append((kernels, tf.Variable(tf.zeros([fan_out]), name=f"dense{k}_bias")))

        def __call__(self, x: Any) -> Any:
            for k, (kernels, bias) in enumerate(self.layers):
                x = tf.concat([tf.matmul(x, w) for w in kernels], axis=1) + bias
                x = tf.tanh(x) if k < len(self.layers) - 1 else x
            return x

    return BlockedMLP()


def mlp(width: int = MLP_WIDTH) -> ModelSpec:
    """The digits task with two tanh hidden layers of ``width`` units: its size, so its bytes per step, grows
    as ``width^2`` (``mlp:256`` 85 k parameters, ``mlp:1024`` 1.1 M, ``mlp:3000`` 9.2 M) while the data, the
    held-out set and the accuracy stay those of ``digits``."""
    if not (isinstance(width, int) and MLP_WIDTHS[0] <= width <= MLP_WIDTHS[1]):
        raise UsageError(f"model mlp:{width}: the width must be a whole number from {MLP_WIDTHS[0]} to "
                         f"{MLP_WIDTHS[1]} (e.g. mlp:1024, 1.1 M parameters)")
    return ModelSpec(build=functools.partial(_mlp_build, width), loss=_xent, data=_digits_data, lr=0.05,
                     name=f"mlp:{width}", eval_data=_digits_eval, accuracy=_classified, train_set=_digits_train)


def builtin_parameters(path: str) -> int | None:
    """How many parameters a built-in model has (``None`` for a user model: only building it can tell)."""
    fixed = {"linear": 2, "keras": 5 * 2 + 2, "digits": 64 * 32 + 32 + 32 * 10 + 10}
    if path in fixed:
        return fixed[path]
    name, _, width = path.partition(":")
    if name == "mlp" and (width.isdigit() or not width):
        return mlp_parameters(int(width) if width else MLP_WIDTH)
    return None


def _builtin(path: str) -> ModelSpec | None:
    """A built-in model by name (``mlp:WIDTH`` included), or ``None``."""
    if path in BUILTIN:
        return BUILTIN[path]()
    name, _, width = path.partition(":")
    if name == "mlp" and width:
        if not width.isdigit():
            raise UsageError(f"model {path!r}: the width must be a whole number, e.g. mlp:1024")
        return mlp(int(width))
    return None


BUILTIN = {"linear": linear, "keras": keras, "digits": digits, "mlp": mlp}
#: What ``--model`` takes, for messages.
MODEL_HINT = "use linear, keras, digits, mlp[:WIDTH], package.module:function or file.py:function"


def _import(module_name: str, fresh: bool) -> Any:
    if module_name.endswith(".py"):  # a file, e.g. the code of a %%dtrain cell saved in its run directory
        import hashlib
        import os
        from importlib.util import module_from_spec, spec_from_file_location

        if not os.path.isfile(module_name):
            raise FileNotFoundError(module_name)
        digest = hashlib.sha1(os.path.abspath(module_name).encode()).hexdigest()[:10]
        spec = spec_from_file_location(f"ssptk_user_{digest}", module_name)
        module = module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module
    if fresh and module_name in sys.modules:
        return importlib.reload(sys.modules[module_name])
    return importlib.import_module(module_name)


def load_model(path: str, fresh: bool = False) -> ModelSpec:
    """Resolve ``linear``, ``keras``, ``digits``, ``mlp[:WIDTH]``, ``package.module:function`` or
    ``path/to/file.py:function``.

    Raises :class:`UsageError` saying which part failed: the module import, the attribute, the
    call, or the type of what it returned. ``fresh``: import the module anew even if it was imported
    before (a warm worker serving run after run must see the user's edits).
    """
    builtin = _builtin(path)
    if builtin is not None:
        return builtin
    if ":" not in path:
        raise UsageError(f"unknown model {path!r}: {MODEL_HINT}")
    module_name, _, func_name = path.rpartition(":")
    try:
        module = _import(module_name, fresh)
    except FileNotFoundError:
        raise UsageError(f"model {path!r}: no file {module_name!r}") from None
    except Exception as e:  # noqa: BLE001 - any failure inside the user's module is theirs to fix
        raise UsageError(f"model {path!r}: cannot import module {module_name!r} ({type(e).__name__}: {e})") from None
    func = getattr(module, func_name, None)
    if func is None or not callable(func):
        raise UsageError(f"model {path!r}: module {module_name!r} has no function {func_name!r}")
    try:
        spec = func()
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"model {path!r}: {func_name}() raised {type(e).__name__}: {e}") from None
    if not isinstance(spec, ModelSpec):
        raise UsageError(
            f"model {path!r}: {func_name}() returned {type(spec).__name__}, expected ssptk.ModelSpec "
            "(see README: User models)"
        )
    return spec
