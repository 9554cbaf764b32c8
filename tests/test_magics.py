"""The %dtrain magics: one grammar with the CLI, one-line errors, and in a real kernel: runs, the cell
magic, the stop button."""
from __future__ import annotations

import json
import queue
import re
import time
from pathlib import Path

import pytest
from conftest import ROOT

from ssptk.cli import build_parser
from ssptk.core.errors import UsageError
from ssptk.core.options import OPTIONS
from ssptk.notebook.magics import cell_model_name, help_text, parse_line


def test_line_defaults_to_run_and_shares_the_cli_options() -> None:
    args = parse_line("--mode ssp --staleness 4 --workers 3 --steps 50 --straggler 2:0.02 --straggler 1:0.01")
    assert args.command == "run" and args.staleness == 4 and args.straggler == ['2:0.02', '1:0.01']
    cli = build_parser().parse_args(["run", "--mode", "ssp", "--staleness", "4"])
    for o in OPTIONS:  # every run option exists in both, with the same default
        assert hasattr(args, o.name) and hasattr(cli, o.name)
    assert parse_line("compare sync ssp:2 async --workers 2").labels == ["sync", "ssp:2", "async"]
    assert parse_line("sweep --staleness 0,2,8").staleness == [0, 2, 8]


def test_help_lists_every_option_of_run_compare_and_sweep() -> None:
    text = help_text()
    for o in OPTIONS:
        assert "--" + o.name.replace("_", "-") in text
    for flag in ("--background", "--cold", "--no-dashboard", "%dtrain compare", "%dtrain sweep", "%%dtrain"):
        assert flag in text


@pytest.mark.parametrize("line, message", [
    ("--workers x", r"argument --workers: invalid int value: 'x'"),
    ("--bogus 1", r"unrecognized arguments: --bogus"),
    ("compare", r"the following arguments are required: MODE"),
    ("sweep --staleness 2,x", r"invalid staleness list '2,x'"),
    ("--mode ssp --staleness 'oops", r"cannot split the line"),
])
def test_bad_lines_raise_one_line_usage_errors(line: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_line(line)


def test_cell_model_name() -> None:
    assert cell_model_name("import x\ndef m():\n    pass\n", None) == "m"
    assert cell_model_name("def a(): pass\ndef b(): pass\n", "b") == "b"
    with pytest.raises(UsageError, match=r"name it with --model NAME \(functions in the cell: a, b\)"):
        cell_model_name("def a(): pass\ndef b(): pass\n", None)
    with pytest.raises(UsageError, match=r"defines no function 'c'"):
        cell_model_name("def a(): pass\n", "c")
    with pytest.raises(UsageError, match=r"syntax error on line 1"):
        cell_model_name("def a(:\n", None)


# --- in a real kernel ------------------------------------------------------------------------------

TWO_MODELS = ("import ssptk\n\n"
              "def first():\n    return ssptk.ModelSpec(build=None, loss=None, data=None)\n\n"
              "def second():\n    return ssptk.ModelSpec(build=None, loss=None, data=None)\n")


@pytest.mark.parametrize("flag", ["--model second", "--model=second"])
def test_cell_magic_takes_the_model_in_both_forms(flag: str, tmp_path: Path) -> None:
    """Regression: ``%%dtrain --model=NAME`` was not recognised (only ``--model NAME`` was). The line then
    fails on --gpus, after the model was found, so nothing trains."""
    from ssptk.notebook.magics import dtrain

    with pytest.raises(UsageError, match=r"^%dtrain: unknown GPU id 7 in --gpus 7"):
        dtrain(f"{flag} --gpus 7 --out {tmp_path / 'r'}", TWO_MODELS)
    with pytest.raises(UsageError, match=r"must define the model function: name it with --model NAME"):
        dtrain(f"--gpus 7 --out {tmp_path / 'r'}", TWO_MODELS)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("line, message", [
    ("--model nosuch_module_xyz:make", r"model 'nosuch_module_xyz:make': cannot import module"),
    ("--gpus 7", r"unknown GPU id 7 in --gpus 7"),
    ("--out {existing}", r"output directory \S+ exists and is not empty: choose another --out"),
])
def test_background_mistakes_fail_in_the_cell(line: str, message: str, tmp_path: Path) -> None:
    """Regression: ``--background`` with a bad model, bad --gpus or a non-empty --out showed "starting the
    cluster…" forever; the error came only at .wait(). It must fail at once, as a foreground run does."""
    import threading

    from ssptk.notebook.magics import dtrain

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    line = line.format(existing=existing)
    if "--out" not in line:
        line += f" --out {tmp_path / 'r'}"
    with pytest.raises(UsageError, match=rf"^%dtrain: {message}"):
        dtrain(f"--mode async --workers 2 --steps 10 --background {line}")
    assert not [t for t in threading.enumerate() if t.name == "ssptk-background-run"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]


@pytest.fixture
def kernel(tmp_path: Path):
    """A real IPython kernel whose working directory is ``tmp_path``, with ssptk loaded."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        run_cell(kc, "%load_ext ssptk")
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    from test_notebooks import ssptk_tasks_under

    deadline = time.monotonic() + 10
    while ssptk_tasks_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ssptk_tasks_under(tmp_path), "tasks left after the kernel shut down"


def run_cell(kc, code: str, timeout: float = 300, on_output=None) -> tuple[dict, list[dict]]:
    """Execute ``code``; returns the reply content and the iopub output messages."""
    msg_id = kc.execute(code)
    outputs: list[dict] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no end of execution within {timeout} s: {code}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] in ("stream", "display_data", "update_display_data", "execute_result", "error"):
            outputs.append(msg)
            if on_output is not None:
                on_output(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    while True:
        reply = kc.get_shell_msg(timeout=30)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply["content"], outputs


def _errors(outputs: list[dict]) -> list[dict]:
    return [m["content"] for m in outputs if m["msg_type"] == "error"]


def _stderr(outputs: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")


def _usage_error(reply: dict, outputs: list[dict], ename: str = "UsageError") -> str:
    """A user mistake shows as one line, no traceback, and the cell fails (so Run All stops)."""
    assert reply["status"] == "error" and reply["ename"] == ename, reply
    (err,) = _errors(outputs)
    assert err["traceback"] == [f"{ename}: {reply['evalue']}"]
    assert "\n" not in reply["evalue"]
    return reply["evalue"]


@pytest.mark.slow
def test_magics_in_a_kernel(kernel, tmp_path: Path) -> None:
    km, kc = kernel
    reply, outs = run_cell(kc, "%dtrain --workers 0")
    assert "--workers must be" in _usage_error(reply, outs)
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written

    reply, outs = run_cell(kc, "res = %dtrain --mode ssp --staleness 1 --workers 2 --steps 40 --out r1\n"
                               "print(len(res.df), res.summary['status'])")
    assert not _errors(outs), _errors(outs)
    text = "".join(m["content"].get("text", "") for m in outs if m["msg_type"] == "stream")
    assert "80 ok" in text
    pngs = [m for m in outs if "image/png" in m["content"].get("data", {})]
    assert pngs, "the dashboard showed no figure"

    cell = (Path(ROOT) / "tests" / "fixtures" / "usermodels.py").read_text()
    reply, outs = run_cell(kc, "%%dtrain --model regression --mode async --workers 2 --steps 30 --out r2 --no-dashboard\n"
                           + cell)
    assert not _errors(outs), _errors(outs)
    assert (tmp_path / "r2" / "user_model.py").read_text() == cell
    config = json.loads((tmp_path / "r2" / "config.json").read_text())
    assert config["options"]["model"] == "r2/user_model.py:regression" and config["tasks"]["reused"]

    # a figure shows without %matplotlib inline (no pyplot: IPython finds the figure's own PNG)
    reply, outs = run_cell(kc, "res.plot()")
    assert not _errors(outs) and [m for m in outs if "image/png" in m["content"].get("data", {})], outs

    # --background, as the README writes it (an assignment, which has no result to show): the live widget
    # shows once, the kernel stays usable, and evaluating `bg` later shows it again
    def widget_views(outs: list[dict]) -> int:
        return sum("application/vnd.jupyter.widget-view+json" in m["content"].get("data", {}) for m in outs)

    reply, outs = run_cell(kc, "bg = %dtrain --mode async --workers 2 --steps 300 --straggler 1:0.01 --out bgrun "
                               "--background")
    assert not _errors(outs), _errors(outs)
    assert widget_views(outs) == 1, outs
    reply, outs = run_cell(kc, "print('usable', bg.done)\nbg")
    assert "usable False" in "".join(m["content"].get("text", "") for m in outs if m["msg_type"] == "stream")
    assert widget_views(outs) == 1, outs
    reply, outs = run_cell(kc, "r = bg.wait(300)\nprint(r.summary['status'], len(r.df), bg.dashboard.png.startswith(b'\\x89PNG'))")
    assert "ok 600 True" in "".join(m["content"].get("text", "") for m in outs if m["msg_type"] == "stream")

    reply, outs = run_cell(kc, "%%dtrain --mode async --workers 2 --steps 30\ndef a(): pass\ndef b(): pass\n")
    assert "name it with --model NAME" in _usage_error(reply, outs)

    # a predicted run comes back like a real one
    reply, outs = run_cell(kc, "p = %dtrain sim --model linear --mode ssp --staleness 1 --workers 2 --steps 20 --out pr\n"
                               "print(type(p).__name__, p.summary['predicted'] is not None, len(p.df))")
    assert not _errors(outs), _errors(outs)
    assert "RunResult True 40" in "".join(m["content"].get("text", "") for m in outs if m["msg_type"] == "stream")


@pytest.mark.slow
def test_the_stop_button_ends_the_run_and_keeps_what_ran(kernel, tmp_path: Path) -> None:
    km, kc = kernel
    seen = {"interrupted_at": None}
    log = tmp_path / "long" / "workers" / "worker-0.jsonl"

    def on_output(msg: dict) -> None:  # interrupt once steps are being logged
        if seen["interrupted_at"] is None and log.exists() and log.stat().st_size > 2000:
            seen["interrupted_at"] = time.monotonic()
            km.interrupt_kernel()

    reply, outs = run_cell(kc, "%dtrain --mode async --workers 2 --steps 5000 --straggler 1:0.02 --out long",
                           on_output=on_output)
    assert seen["interrupted_at"] is not None, "the run ended before it could be interrupted"
    assert time.monotonic() - seen["interrupted_at"] < 15
    assert "interrupted after" in (message := _usage_error(reply, outs, "RunInterrupted")) and "long" in message
    summary = json.loads((tmp_path / "long" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGINT" and 0 < summary["total_steps"] < 10000
    for path in (tmp_path / "long" / "workers").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            json.loads(line)
    from test_notebooks import ssptk_tasks_under

    deadline = time.monotonic() + 5
    while ssptk_tasks_under(tmp_path, fork_server=False) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not ssptk_tasks_under(tmp_path, fork_server=False), "the interrupted run left tasks running"
    # the kernel is usable again, and the next run starts a fresh warm cluster
    reply, outs = run_cell(kc, "r = %dtrain --mode async --workers 2 --steps 20 --out again --no-dashboard\n"
                               "print(r.summary['status'], r.config['tasks']['reused'])")
    assert "ok False" in "".join(m["content"].get("text", "") for m in outs if m["msg_type"] == "stream")


@pytest.mark.slow
@pytest.mark.parametrize("warm", [False, True])
def test_background_stop_during_start_up(warm: bool, tmp_path: Path, warm_pool: None) -> None:
    """Regression: stop() while the tasks were still starting waited for the whole start-up (and then some).
    It ends the run within seconds, keeps a summary that says so, and leaves no task behind."""
    from conftest import assert_gone, warm_processes

    from ssptk.notebook.background import BackgroundRun

    out = tmp_path / "bg"
    bg = BackgroundRun.start(mode="async", workers=2, steps=5000, out=str(out), warm=warm)
    deadline = time.monotonic() + 60
    while not list((out / "logs").glob("*.log")) and not list(Path("/tmp").glob("ssptk-warm-*/logs/*.log")) \
            and time.monotonic() < deadline:
        time.sleep(0.02)  # the tasks exist: TensorFlow's import in them takes seconds more
    events = (out / "workers" / "worker-0.jsonl")
    assert not events.exists() or '"start"' not in events.read_text(), "start-up was over before stop()"
    t0 = time.monotonic()
    bg.stop(timeout=60)
    took = time.monotonic() - t0
    assert bg.done and bg.interrupted and took < 15, (bg, took)
    assert bg.wait().summary["status"] == "interrupted"  # the stopped run, not None
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "interrupted" in summary["reason"] and summary["signal"] is None
    assert_gone(str(out), within=10)
    if warm:  # a cluster that never served a run is not kept
        deadline = time.monotonic() + 10
        while warm_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not warm_processes()


@pytest.mark.slow
def test_a_background_runs_widget_shows_its_cold_start(tmp_path: Path) -> None:
    """Issue 37: during a cold start (no record comes, seconds to ~40 s) the background widget said "elapsed
    0.0 s" throughout, then showed six empty panels. On a real cluster: the line counts the tasks that are ready,
    its elapsed time moves, and the image comes with the first step records."""
    from conftest import assert_gone

    from ssptk.notebook.background import BackgroundRun

    out = tmp_path / "bg"
    lines: list[tuple[float, str]] = []
    images: list[int] = []  # the step records the dashboard held when the image was set
    bg = BackgroundRun.start(mode="async", workers=2, steps=40, out=str(out), warm=False)
    t0 = time.monotonic()
    dash = bg.dashboard
    dash._html.observe(lambda change: lines.append((time.monotonic(), change["new"])), names="value")
    bg.widget.children[0].observe(lambda _change: images.append(dash.state.n_steps), names="value")
    result = bg.wait(300)
    assert result.summary["status"] == "ok" and images and images[0] > 0  # no figure before the first steps
    # the line while no step was recorded (then it counts minibatches)
    first_steps = min([t for t, v in lines if "minibatches" in v] or [time.monotonic()])
    start_up = [v for t, v in lines if t < first_steps]
    assert any("tasks ready" in v for v in start_up), start_up
    shown = [float(m.group(1)) for v in start_up if (m := re.search(r"elapsed (\d+\.\d) s", v))]
    if first_steps - t0 > 3.0:  # a start-up of a few seconds: the clock moved during it
        assert max(shown, default=0.0) >= 1.0, start_up
    assert_gone(str(out), within=10)
