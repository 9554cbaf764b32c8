"""Tests of ssptk.render.tensorboard: TensorBoard event files written from hand-made run directories."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    from conftest import skip_or_fail
except ImportError:  # tests/ imported as a package
    from tests.conftest import skip_or_fail

try:
    import tensorboard  # noqa: F401 - a dependency of ssptk; the checks read its event files with it
except ImportError:
    skip_or_fail("tensorboard is not installed: pip install -e .")

from ssptk.render import tensorboard as tboard

try:  # shared synthetic run directories
    from test_analysis import DONE_A, RUN_A, SKEW_A, START_A, step_record, write_run
except ImportError:  # tests/ imported as a package
    from tests.test_analysis import DONE_A, RUN_A, SKEW_A, START_A, step_record, write_run

SUMMARY_A = {"status": "ok", "mode": "ssp", "staleness": 1, "workers": 3, "final_loss": 0.12}


def accumulator(folder: Path):
    """Every scalar and tensor of the event files directly in ``folder`` (nothing sampled away)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def series(acc, tag: str) -> tuple[list[int], list[float], list[float]]:
    """(steps, values, wall times) of one scalar tag."""
    events = acc.Scalars(tag)
    return [e.step for e in events], [e.value for e in events], [e.wall_time for e in events]


def text(acc, tag: str) -> object:
    (event,) = acc.Tensors(tag)
    return json.loads(textwrap.dedent(event.tensor_proto.string_val[0].decode()))


def event_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("events.out.tfevents.*"))


@pytest.fixture
def run_a(tmp_path: Path) -> Path:
    return write_run(tmp_path / "a", RUN_A, workers=3, mode="ssp", staleness=1, start=START_A,
                     done=DONE_A, summary=SUMMARY_A)


def test_scalars_match_the_records(run_a: Path) -> None:
    out = tboard.write_events(str(run_a))
    assert out == str(run_a / "tensorboard")
    root = accumulator(run_a / "tensorboard")
    assert sorted(root.Tags()["scalars"]) == ["loss/all", "skew/steps"]
    times = [r[0] for r in RUN_A]
    # loss/all: one point per global step (here the record index); the smoothing window (5 * 3
    # workers) is longer than the run, so the smoothed loss is the running mean.
    steps, values, walls = series(root, "loss/all")
    losses = [r[3] for r in RUN_A]
    assert steps == list(range(1, 11))
    assert values == pytest.approx([sum(losses[:i + 1]) / (i + 1) for i in range(10)], rel=1e-6)
    assert walls == times
    steps, values, walls = series(root, "skew/steps")
    assert (steps, values, walls) == (list(range(1, 11)), SKEW_A, times)
    assert text(root, "config")["mode"] == "ssp" and text(root, "config")["workers"] == 3
    assert text(root, "summary") == SUMMARY_A
    for w in range(3):
        acc = accumulator(run_a / "tensorboard" / f"worker_{w}")
        assert sorted(acc.Tags()["scalars"]) == ["loss/worker", "progress/worker", "staleness/worker",
                                                 "wait/worker"]
        mine = [(i + 1, r) for i, r in enumerate(RUN_A) if r[1] == w]  # (record index, record)
        own_steps = [r[2] for _, r in mine]
        own_times = [r[0] for _, r in mine]
        steps, values, walls = series(acc, "loss/worker")
        assert steps == own_steps and walls == own_times
        assert values == pytest.approx([r[3] for _, r in mine])
        steps, values, walls = series(acc, "wait/worker")
        waits = [r[4] for _, r in mine]
        assert values == pytest.approx([sum(waits[:i + 1]) for i in range(len(waits))], abs=1e-6)
        assert steps == own_steps and walls == own_times
        steps, values, _ = series(acc, "staleness/worker")
        assert steps == own_steps and values == [r[5] for _, r in mine]
        steps, values, walls = series(acc, "progress/worker")
        assert steps == [i for i, _ in mine] and values == own_steps and walls == own_times
    assert not (run_a / "tensorboard" / "worker_3").exists()


def test_loss_all_has_one_point_per_global_step(tmp_path: Path) -> None:
    """Sync-like: both workers' records share each global step; window 5 * 2 = 10 records rolls."""
    run = tmp_path / "sync"
    (run / "workers").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"options": {"mode": "sync", "workers": 2}}))
    losses = {(k, w): 10.0 - k + 0.5 * w for k in range(1, 9) for w in range(2)}
    for w in range(2):
        lines = []
        for k in range(1, 9):
            r = step_record(k + 0.1 * (w + 1), w, k, losses[k, w], minibatch=2 * (k - 1) + w)
            r["global_step"] = k
            lines.append(json.dumps(r))
        (run / "workers" / f"worker-{w}.jsonl").write_text("\n".join(lines) + "\n")
    tboard.write_events(str(run))
    ordered = [losses[k, w] for k in range(1, 9) for w in range(2)]  # time order
    want = [sum(ordered[max(0, i - 9):i + 1]) / len(ordered[max(0, i - 9):i + 1])
            for i in range(1, 16, 2)]  # the later record of each global step
    steps, values, walls = series(accumulator(run / "tensorboard"), "loss/all")
    assert steps == list(range(1, 9))
    assert values == pytest.approx(want, rel=1e-6)
    assert walls == [k + 0.2 for k in range(1, 9)]


def test_records_are_framed_with_valid_crcs(run_a: Path) -> None:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    tboard.write_events(str(run_a))
    files = event_files(run_a / "tensorboard")
    assert len(files) == 4  # tensorboard/ and worker_0..2/
    for path in files:
        data, pos, n = path.read_bytes(), 0, 0
        while pos < len(data):
            head = data[pos:pos + 8]
            (length,) = struct.unpack("<Q", head)
            assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(head)
            payload = data[pos + 12:pos + 12 + length]
            assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == masked_crc32c(payload)
            pos, n = pos + 16 + length, n + 1
        assert pos == len(data) and n > 1


def test_writing_again_replaces_the_files(run_a: Path) -> None:
    tboard.write_events(str(run_a))
    tboard.write_events(str(run_a))
    assert len(event_files(run_a / "tensorboard")) == 4
    assert len(accumulator(run_a / "tensorboard").Scalars("skew/steps")) == len(RUN_A)


def test_run_without_steps_does_not_raise(tmp_path: Path) -> None:
    run = tmp_path / "failed"
    (run / "workers").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"options": {"mode": "ssp", "workers": 2}}))
    (run / "workers" / "worker-0.jsonl").write_text(
        json.dumps({"event": "start", "t": 5.0, "worker": 0}) + "\n"
        + json.dumps({"event": "error", "t": 6.0, "worker": 0, "message": "boom"}) + "\n")
    out = tboard.write_events(str(run))
    acc = accumulator(Path(out))
    assert acc.Tags()["scalars"] == [] and text(acc, "config")["mode"] == "ssp"
    assert [p.parent.name for p in event_files(run / "tensorboard")] == ["tensorboard"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert tboard.write_events(str(empty)) == str(empty / "tensorboard")


def test_without_tensorboard_nothing_is_written(run_a: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto", None)  # import now fails
    assert tboard.write_events(str(run_a)) is None
    assert not (run_a / "tensorboard").exists()


def test_launcher_hook_never_raises(run_a: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ssptk.experiment import finish as summary

    calls: list[tuple[str, object]] = []

    def broken(run_dir: str, loaded: object = None) -> str:
        calls.append((run_dir, loaded))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tboard, "write_events", broken)
    summary.write_tensorboard(str(run_a))  # swallowed
    assert calls == [(str(run_a), None)], "the hook never asked for the event files"


def test_writing_does_not_import_tensorflow(run_a: Path) -> None:
    code = ("import sys; from ssptk.render.tensorboard import write_events; "
            f"write_events({str(run_a)!r}); print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert len(event_files(run_a / "tensorboard")) == 4
