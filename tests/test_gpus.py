"""GPU discovery and assignment, with a fake nvidia-smi on PATH (these machines have no GPU)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import FIXTURES, cluster_processes

from ssptk.core.errors import UsageError
from ssptk.launch.gpus import assign_gpus, detect_gpus


@pytest.fixture
def fake_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FIXTURES}{os.pathsep}{os.environ['PATH']}")


def test_detect_lists_fake_gpus(fake_smi: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_GPUS", "3")
    assert detect_gpus() == ["0", "1", "2"]


def test_no_nvidia_smi_means_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() == []
    assert set(assign_gpus("auto", 3).values()) == {""}


def test_auto_round_robin_and_ps_on_cpu(fake_smi: None) -> None:
    a = assign_gpus("auto", 5)
    assert a == {"ps:0": "", "worker:0": "0", "worker:1": "1", "worker:2": "0", "worker:3": "1", "worker:4": "0"}


def test_explicit_ids_and_none(fake_smi: None) -> None:
    assert assign_gpus("1", 2) == {"ps:0": "", "worker:0": "1", "worker:1": "1"}
    assert assign_gpus("none", 2) == {"ps:0": "", "worker:0": "", "worker:1": ""}
    with pytest.raises(UsageError, match=r"unknown GPU id 2 in --gpus 0,2: nvidia-smi lists 0, 1"):
        assign_gpus("0,2", 2)
    with pytest.raises(UsageError, match=r"bad --gpus 'x'"):
        assign_gpus("x", 2)


def test_explicit_ids_without_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="nvidia-smi lists none"):
        assign_gpus("0", 1)


@pytest.mark.slow
def test_assignment_reaches_config_and_tasks(fake_smi: None, run_dir: Path) -> None:
    """A real run with two fake GPUs: config.json records them and each task got its CUDA_VISIBLE_DEVICES."""
    import ssptk

    seen: dict[str, str | None] = {}

    def progress(done: int, total: int) -> None:  # while the tasks run: what each one's environment holds
        for p in [] if seen else cluster_processes(str(run_dir)):
            argv = p.cmdline()
            seen[argv[argv.index("--task") + 1]] = p.environ().get("CUDA_VISIBLE_DEVICES")

    r = ssptk.run(mode="async", workers=3, steps=20, out=str(run_dir), progress=progress)
    config = json.loads((run_dir / "config.json").read_text())
    assigned = {"ps:0": "", "worker:0": "0", "worker:1": "1", "worker:2": "0"}
    assert config["gpu_assignment"] == assigned
    assert seen == assigned
    assert r.ok  # TF falls back to the CPU when the listed GPU does not exist


@pytest.mark.slow
def test_shared_layout_places_each_worker_on_its_gpu(fake_smi: None, run_dir: Path) -> None:
    """The shared process sees every assigned GPU; each worker's ops are placed on its own one."""
    import ssptk

    r = ssptk.run(mode="async", workers=3, steps=20, out=str(run_dir), layout="shared")
    log = (run_dir / "logs" / "shared.log").read_text()
    assert "CUDA_VISIBLE_DEVICES=0,1; worker:0 on GPU:0, worker:1 on GPU:1, worker:2 on GPU:0" in log
    assert r.ok  # soft placement: the fake GPUs do not exist, so the ops run on the CPU
