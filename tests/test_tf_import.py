"""A task imports TensorFlow without the Keras 3 that ``import tensorflow`` loads for nothing (~1.4 s of a
task's start-up: Keras 3's own package pulls in its layers and scikit-learn), and a model that wants Keras 3 still
gets it whole."""
from __future__ import annotations

import os
import subprocess
import sys

CHECK = """
import sys
from ssptk.runtime.tf_import import skip_eager_keras
skip_eager_keras()
import tensorflow as tf
print("eager keras:", "keras.src.optimizers" in sys.modules, "keras" in sys.modules, "sklearn" in sys.modules)
import keras
print("keras later:", keras.optimizers.SGD(0.1).__class__.__name__)
"""


INSTALLED = """
import sys
from ssptk.runtime.tf_import import skip_eager_keras
skip_eager_keras()
print(any(type(f).__name__ == "_SkipEagerKeras" for f in sys.meta_path))
"""


def _run(code: str, env: dict[str, str]) -> str:
    # a bare TensorFlow import took over 120 s at load 9-31 on a 2-core laptop (issue 36): the wait is a bound, not a
    # measure
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_task_skips_keras_3_and_a_model_can_still_import_it() -> None:
    assert _run(CHECK, {"SSPTK_EAGER_KERAS": "0"}).splitlines() == ["eager keras: False False False", "keras later: SGD"]


def test_ssptk_eager_keras_keeps_tensorflow_s_own_import() -> None:
    assert _run(INSTALLED, {"SSPTK_EAGER_KERAS": "0"}).strip() == "True"
    assert _run(INSTALLED, {"SSPTK_EAGER_KERAS": "1"}).strip() == "False"
