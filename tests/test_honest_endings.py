"""Reliability, third round (issue 26): exit codes that never lie, values checked everywhere, and words that
match what happened. ``ssptk run``, ``compare`` and ``sim`` are real processes here (real clusters and a real
predicting process in the slow tests); every test that starts a cluster proves its tasks are gone.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import FIXTURES, assert_gone, ssptk_cmd

import ssptk
from ssptk.cli import StopSignals
from ssptk.core.errors import RunInterrupted, UsageError, raise_if_stopped
from ssptk.experiment.predicted_runs import predict_run
from ssptk.rundir import RunDir
from ssptk.rundir.claim import CLAIM_FILE

QUICK = ["--workers", "2", "--gpus", "none"]


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def _cli(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ssptk_cmd(), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=_env())


# --- item 2: a model that calls sys.exit(0), or raises KeyboardInterrupt, fails in one line ----------------

EXITS = "called sys.exit(0) while ssptk imported it and called it: a model function must return an ssptk.ModelSpec; " \
        "nothing was started"
REFUSED = [
    (["run", "--model", "usermodel_exits:model"], f"model 'usermodel_exits:model' {EXITS}"),
    (["run", "--model", "usermodels_exit:exits"], f"model 'usermodels_exit:exits' {EXITS}"),
    (["compare", "sync", "async", "--model", "usermodels_exit:exits"], f"model 'usermodels_exit:exits' {EXITS}"),
    (["sim", "--model", "usermodels_exit:exits"], f"model 'usermodels_exit:exits' {EXITS}"),
    (["run", "--model", "usermodels_exit:interrupts"],
     "model 'usermodels_exit:interrupts' raised KeyboardInterrupt (no signal came) while ssptk imported it and "
     "called it: a model function must return an ssptk.ModelSpec; nothing was started"),
]


def test_a_model_that_exits_or_interrupts_fails_in_one_line(tmp_path: Path) -> None:
    """Each exited 0 with no output and nothing written (``sys.exit(0)``), or said that the logs and summary were
    kept when nothing was written (``KeyboardInterrupt``). Now: exit 1, one line naming what the model did."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        started = []
        for k, (args, _) in enumerate(REFUSED):
            (tmp_path / str(k)).mkdir()
            extra = QUICK if args[0] != "sim" else ["--workers", "2"]  # sim has no --gpus
            started.append(pool.submit(_cli, [*args, *extra, "--out", "out"], tmp_path / str(k)))
        done = [f.result() for f in started]
    for k, ((args, message), p) in enumerate(zip(REFUSED, done, strict=True)):
        assert p.returncode == 1, (args, p.returncode, p.stderr[-2000:])
        assert p.stderr == f"ssptk: run failed: ssptk: {message}\n" and p.stdout == "", (args, p.stderr)
        assert sorted(os.listdir(tmp_path / str(k))) == [], f"{args} wrote {os.listdir(tmp_path / str(k))}"


@pytest.mark.slow
def test_a_prediction_process_that_exits_0_fails_the_prediction(tmp_path: Path) -> None:
    """The predicting process ended with exit code 0 half-way: the summary said failed, ssptk exited 0."""
    out = tmp_path / "predicted"
    p = _cli(["sim", "--model", "usermodels_exit:exits_while_predicting", "--workers", "2", "--steps", "50",
              "--out", str(out)], tmp_path)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    first = p.stderr.splitlines()[0]
    assert first == "ssptk: run failed: predict (exit code 0): exited without finishing: its process ended (exit " \
                    "code 0) after 0 of 1 predictions; does the model's code call exit()?", p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_task"] == "predict"
    assert_gone(str(tmp_path))


@pytest.mark.slow
def test_compare_predict_whose_predictions_all_fail_exits_1(tmp_path: Path) -> None:
    """The run was fine, every prediction failed ("predicted none" under the table): that exited 0."""
    out = tmp_path / "cmp"
    p = _cli(["compare", "async", "--predict", "--model", "usermodels_exit:exits_while_predicting", "--steps", "30",
              *QUICK, "--out", str(out)], tmp_path, timeout=400)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "ssptk: async (predicted) failed: predict (exit code 0): exited without finishing" in p.stderr, p.stderr
    assert json.loads((out / "async" / "summary.json").read_text())["status"] == "ok"
    assert json.loads((out / "predicted" / "async" / "summary.json").read_text())["status"] == "failed"
    assert_gone(str(tmp_path))


# --- item 8: values checked everywhere ----------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"lr": "nan"}, r"^--lr must be a finite number > 0, got nan$"),  # what --lr nan says
    ({"lr": "abc"}, r"^--lr must be a number, got 'abc'$"),
    ({"out": 123}, r"^--out must be a string, got 123$"),
    ({"stall_timeout": True}, r"^--stall-timeout must be a number of seconds, got True$"),
    ({"model": 5}, r"^--model must be a string, got 5$"),
    ({"allow_nan": "yes"}, r"^--allow-nan is a switch: give True or False, not 'yes'$"),
    ({"straggler": 5}, r"^bad --straggler 5: use I:SECONDS strings"),
    ({"jitter": "pause:1:1e308", "stall_timeout": 0}, r"^bad --jitter 'pause:1:1e\+308': its delays run over a day"),
    ({"straggler": ["1:1e308", "1:1e308"], "stall_timeout": 0},
     r"^--straggler: worker 1 would be held inf s every step, more than a day \(86400 s\)"),
    ({"straggler": ["1:1e308", "1:1e308"]}, r"^--straggler: worker 1 would be held inf s"),  # not "more than inf"
])
def test_api_values_are_checked_by_the_option_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict,
                                                    message: str) -> None:
    """``ssptk.run(lr="nan")`` raised TypeError, ``out=123`` too, ``stall_timeout=True`` was one second, and
    delays past a day crashed a worker (``OverflowError: timestamp out of range``). Every entry refuses them in
    the CLI's one line, before anything is created."""
    monkeypatch.chdir(tmp_path)
    for call in (lambda: ssptk.run(**kwargs), lambda: ssptk.compare(["sync", "async"], **kwargs),
                 lambda: predict_run(**{"model": "linear", **kwargs})):
        with pytest.raises(UsageError, match=message) as refused:
            call()
        assert "\n" not in str(refused.value)
    assert os.listdir(tmp_path) == []


def test_sim_refuses_delays_past_a_day(tmp_path: Path) -> None:
    p = _cli(["sim", "--jitter", "pause:1:1e308"], tmp_path)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr.startswith("ssptk: error: bad --jitter 'pause:1:1e+308': its delays run over a day") and \
        p.stderr.count("\n") == 1, p.stderr


# --- item 10: words that match what happened ----------------------------------------------------------------

def test_a_signal_before_the_run_directory_exists_says_nothing_was_written(tmp_path: Path) -> None:
    """SIGINT while the model was being imported said "the logs and summary kept": nothing had been written."""
    mark = tmp_path / "importing"
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--model", "usermodel_waits:model", *QUICK, "--out", "out"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=_env(SSPTK_TEST_MARK=str(mark)))
    deadline = time.monotonic() + 120
    while not mark.exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines() == ["ssptk: SIGINT: stopping; no run has started",
                                        "ssptk: interrupted before any run started; nothing was written"], err
    assert sorted(os.listdir(tmp_path)) == ["importing"]


_SIGTERM_AFTER_SUMMARY = """
import os, signal, sys, time
from ssptk.experiment import finish

def tensorboard_then_sigterm(run_dir, loaded=None):  # summary.json is written: a SIGTERM comes now
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)

finish.write_tensorboard = tensorboard_then_sigterm
from ssptk.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_sigterm_after_the_summary_was_written_says_the_run_had_ended(tmp_path: Path) -> None:
    """It said "every task was stopped, the logs and summary kept" while the summary said ok."""
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-c", _SIGTERM_AFTER_SUMMARY, "run", "--mode", "async", "--steps", "20",
                        *QUICK, "--out", str(out)], capture_output=True, text=True, timeout=240, env=_env())
    assert p.returncode == 143, (p.returncode, p.stderr[-2000:])
    assert p.stderr.strip().splitlines()[-1] == f"ssptk: stopped by SIGTERM after the run in {out} had ended: its " \
                                                "summary.json says ok", p.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "ok"
    assert_gone(str(out))


def test_a_stale_claim_says_so_and_how_to_reuse_the_directory(tmp_path: Path) -> None:
    """A directory holding only a dead run's claim said "exists and is not empty"."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "out"
    out.mkdir()
    claim = {"pid": dead.pid, "host": socket.gethostname(), "mode": "async", "started": "2025-01-02T03:04:05+0000"}
    (out / CLAIM_FILE).write_text(json.dumps(claim))
    p = _cli(["run", *QUICK, "--out", str(out)], tmp_path)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr == f"ssptk: error: {out} holds only the stale claim of run async (pid {dead.pid}, started " \
                       f"2025-01-02T03:04:05+0000), which is no longer running: remove {out / CLAIM_FILE} to reuse " \
                       "it, or choose another --out\n"
    assert sorted(os.listdir(out)) == [CLAIM_FILE]
    (out / CLAIM_FILE).unlink()  # as the message says
    assert RunDir.create(str(out), "sync").path == str(out)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped raise, printed
def test_a_signal_whose_raise_python_dropped_still_stops_the_run() -> None:
    """CI lost a Ctrl-C: it came while ``subprocess`` ran logging's at-fork hook, where Python prints the
    handler's RunInterrupted and goes on, and the run went on. The handler also records the signal, and the loops
    that follow tasks (``raise_if_stopped``) raise it; once the command has ended it is forgotten."""
    class DropsItsErrors:
        def __del__(self) -> None:  # like an at-fork hook: what is raised here is printed, not propagated
            signal.raise_signal(signal.SIGINT)

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    went_on = False
    try:
        with StopSignals():
            DropsItsErrors()
            went_on = True  # the handler's raise was dropped, as in CI
            raise_if_stopped(None, "not this")
    except RunInterrupted as e:
        assert went_on and e.signal == "SIGINT" and str(e) == "stopped by SIGINT"
    else:
        pytest.fail("the dropped signal was never raised again")
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    raise_if_stopped(None, "not this")  # forgotten when the command ended
