"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel, with no error output,
and leaves its final figures in the saved outputs and no task behind."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from conftest import ROOT
from nbclient import NotebookClient
from test_browser import browser_available

pytestmark = pytest.mark.slow

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def ssptk_tasks_under(path: Path, fork_server: bool = True) -> list[psutil.Process]:
    """``ssptk.worker`` processes whose working directory is under ``path``; ``fork_server=False``: but for the
    kernel's fork server, which lives as long as the kernel (ssptk.launch.forking)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ssptk.worker" not in cmd or p.info["status"] == psutil.STATUS_ZOMBIE \
                or (not fork_server and "--fork-server" in cmd):
            continue
        try:
            if p.cwd().startswith(str(path)):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def execute(name: str, tmp_path: Path) -> nbformat.NotebookNode:
    nb_path = tmp_path / name
    shutil.copy(ROOT / "notebooks" / name, nb_path)
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(nb, nb_path)
    deadline = time.monotonic() + 10
    while ssptk_tasks_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ssptk_tasks_under(tmp_path), "tasks left after the kernel shut down"
    return nb


def outputs(nb: nbformat.NotebookNode) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_there_are_notebooks() -> None:
    assert {p.name for p in NOTEBOOKS} >= {"quickstart.ipynb", "sync_ssp_async.ipynb", "staleness_explorer.ipynb",
                                           "custom_keras.ipynb"}


#: quickstart.ipynb runs whole in JupyterLab in tests/test_browser.py (errors, figures, widgets, no task left) where the
#: browser is there, as it is under CI: not twice
IN_LAB = pytest.mark.skipif(browser_available(), reason="tests/test_browser.py runs it in JupyterLab")
#: marks of single notebooks: quickstart runs in JupyterLab where a browser is; network shapes links
MARKS = {"quickstart.ipynb": IN_LAB, "network.ipynb": pytest.mark.needs_tc}


@pytest.mark.parametrize("name", [pytest.param(p.name, marks=MARKS[p.name]) if p.name in MARKS else p.name
                                  for p in NOTEBOOKS])
def test_notebook_runs_clean(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSPTK_NOTEBOOK_QUICK", "1")  # notebooks that honour it run a smaller version of a long cell
    nb = execute(name, tmp_path)
    outs = outputs(nb)
    errors = [o for o in outs if o.get("output_type") == "error"]
    assert not errors, f"{name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    tracebacks = [o for o in outs if o.get("name") == "stderr" and "Traceback" in o.get("text", "")]
    assert not tracebacks, tracebacks[0]["text"][-2000:]
    images = [o for o in outs if "image/png" in o.get("data", {})
              or "<img" in str(o.get("data", {}).get("text/html", ""))]
    assert images, f"{name}: no figure in the saved outputs"
    assert list(tmp_path.glob("runs/*/config.json")) or list(tmp_path.glob("runs/*/*/config.json"))
    if name == "sync_ssp_async.ipynb":  # the both-axes part printed its numbers on the held-out loss
        text = "".join(o.get("text", "") for o in outs if o.get("name") == "stdout")
        assert "target: held-out loss" in text and "best: " in text and "steps/s" in text, text[-2000:]
