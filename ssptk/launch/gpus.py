"""GPU discovery (``nvidia-smi -L``) and the assignment of GPUs to tasks via ``CUDA_VISIBLE_DEVICES``."""
from __future__ import annotations

import re
import shutil
import subprocess

from ssptk.core.errors import UsageError

_GPU_LINE = re.compile(r"^GPU (\d+):")


def detect_gpus() -> list[str]:
    """The GPU indices ``nvidia-smi -L`` lists; empty when there is no nvidia-smi or it fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [m.group(1) for line in out.stdout.splitlines() if (m := _GPU_LINE.match(line.strip()))]


def assign_gpus(spec: str, workers: int, available: list[str] | None = None) -> dict[str, str]:
    """Map each task (``ps:0``, ``worker:I``) to its ``CUDA_VISIBLE_DEVICES`` value (``""`` = CPU only).

    ``auto``: worker i gets GPU ``i mod G`` of the G GPUs listed, or the CPU if there are none;
    ``none``: all on CPU; ``0,2``: worker i gets the i-th of these (mod their number). The PS never
    gets a GPU: it only holds variables.
    """
    spec = (spec or "auto").strip()
    tasks = {"ps:0": ""}
    if spec == "none":
        return tasks | {f"worker:{i}": "" for i in range(workers)}
    gpus = detect_gpus() if available is None else list(available)
    if spec == "auto":
        chosen = gpus
    else:
        chosen = [g.strip() for g in spec.split(",") if g.strip()]
        if not chosen or not all(g.isdigit() for g in chosen):
            raise UsageError(f"bad --gpus {spec!r}: use auto, none, or GPU ids like 0,2")
        unknown = [g for g in chosen if g not in gpus]
        if unknown:
            listed = ", ".join(gpus) if gpus else "none"
            raise UsageError(f"unknown GPU id {unknown[0]} in --gpus {spec}: nvidia-smi lists {listed}")
    return tasks | {f"worker:{i}": (chosen[i % len(chosen)] if chosen else "") for i in range(workers)}
