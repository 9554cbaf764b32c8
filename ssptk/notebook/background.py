"""A run in a background thread, so the notebook kernel stays usable (``%dtrain --background``)."""
from __future__ import annotations

import threading
from typing import Any

from ssptk.core.errors import RunFailed


class BackgroundRun:
    """Handle of a run going on in a background thread, with its live dashboard widget and a Stop button.

    ``.widget`` shows the run as it goes; ``.wait()`` returns the :class:`~ssptk.api.RunResult` (raising
    :class:`RunFailed` if it failed; a stopped run's result says ``interrupted``); ``.stop()`` and the widget's
    Stop button end it as Ctrl-C would (every task is stopped, the logs of what ran are kept).
    """

    def __init__(self, dashboard: Any, stop_button: Any = None) -> None:
        self.dashboard = dashboard
        self.stop_button = stop_button
        self.result: Any = None
        self.error: BaseException | None = None
        self.interrupted = False
        self._cancel = threading.Event()
        self._shown_in: int | None = None  # the cell that displayed it (see show_now)
        self._thread: threading.Thread | None = None
        if stop_button is not None:
            stop_button.on_click(lambda _button: self._stop_clicked())

    @classmethod
    def start(cls, *, warm: bool = False, model_source: str | None = None, **options: Any) -> BackgroundRun:
        """Start ``ssptk.run(**options)`` in a thread. Everything that can be checked before a process
        starts (options, the model, ``--gpus``, ``--out``) is checked here, so a mistake raises at once."""
        from ssptk.experiment.single import prepare
        from ssptk.notebook.dashboard import LiveDashboard
        from ssptk.notebook.runner import ipywidgets

        prepared = prepare(model_source=model_source, **options)
        button = ipywidgets().Button(description="Stop", icon="stop", button_style="warning",
                                     tooltip="end the run now (every task is stopped; the logs of what ran are kept)",
                                     layout=ipywidgets().Layout(width="6em", flex="0 0 auto"))
        handle = cls(LiveDashboard(widget=True, controls=[button]), button)
        handle._thread = threading.Thread(target=handle._work, args=(prepared, warm), name="ssptk-background-run",
                                          daemon=True)
        handle._thread.start()
        return handle

    def _work(self, prepared: Any, warm: bool) -> None:
        from ssptk.experiment.finish import interruption
        from ssptk.experiment.result import RunResult
        from ssptk.experiment.single import execute
        from ssptk.rundir import RunDir

        try:
            self.result = execute(prepared, observer=self.dashboard, cancel=self._cancel, raise_on_failure=False,
                                  warm=warm)
        except KeyboardInterrupt as e:  # stopped: the run directory keeps what ran, and its summary says so
            self.interrupted = True
            self.result = RunResult(prepared.run_dir, prepared.opts, RunDir(prepared.run_dir).summary(),
                                    interruption(e))
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            self.error = e
        finally:
            self._button(disabled=True)

    def _button(self, disabled: bool, description: str | None = None) -> None:
        if self.stop_button is not None:
            self.stop_button.disabled = disabled
            if description is not None:
                self.stop_button.description = description

    def _stop_clicked(self) -> None:
        """The Stop button: ask the run to end and return at once (the kernel's thread must not wait)."""
        if not self.done:
            self._button(disabled=True, description="stopping")
            self._cancel.set()

    @property
    def widget(self) -> Any:
        return self.dashboard.widget

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the run ends; its RunResult (a stopped run's too: its summary says ``interrupted``).
        Raises its failure."""
        if self._thread is not None:
            self._thread.join(timeout)
        if not self.done:
            raise TimeoutError(f"the run is still going after {timeout} s")
        if self.error is not None:
            raise self.error
        if not self.interrupted and self.result is not None and self.result.failure is not None:
            raise RunFailed(self.result.failure, self.result)
        return self.result

    def stop(self, timeout: float = 30.0) -> Any:
        """End the run now (its tasks are stopped; the logs and summary of what ran are kept); returns the run
        as :meth:`wait` does (``None`` if it has not ended within ``timeout`` seconds)."""
        self._button(disabled=True, description="stopping")
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.wait(0) if self.done else None

    def show_now(self) -> None:
        """Display the live widget in the running cell (where ``%dtrain --background`` starts the run)."""
        from IPython.display import display

        display(self.widget)
        self._shown_in = _cell_number()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if self._shown_in is not None and self._shown_in == _cell_number():
            return  # the cell that started the run already shows it: not twice when it is also its result
        display(self.widget)

    def __repr__(self) -> str:
        state = "stopped" if self.interrupted else ("done" if self.done else "running")
        run_dir = getattr(self.result, "run_dir", None)
        return f"<BackgroundRun {state}{f': {run_dir}' if run_dir else ''}>"


def _cell_number() -> int | None:
    """The execution count of the cell IPython is running (``None`` outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else int(shell.execution_count)
