"""A run in a background thread, so the notebook kernel stays usable (``%dtrain --background``)."""
from __future__ import annotations

import threading
from typing import Any

from ssptk.core.errors import RunFailed


class BackgroundRun:
    """Handle of a run going on in a background thread, with its live dashboard widget.

    ``.widget`` shows the run as it goes; ``.wait()`` returns the :class:`~ssptk.api.RunResult`
    (raising :class:`RunFailed` if it failed); ``.stop()`` ends it as Ctrl-C would (every task is
    stopped, the logs of what ran are kept).
    """

    def __init__(self, dashboard: Any) -> None:
        self.dashboard = dashboard
        self.result: Any = None
        self.error: BaseException | None = None
        self.interrupted = False
        self._cancel = threading.Event()
        self._shown_in: int | None = None  # the cell that displayed it (see show_now)
        self._thread: threading.Thread | None = None

    @classmethod
    def start(cls, *, warm: bool = False, model_source: str | None = None, **options: Any) -> BackgroundRun:
        """Start ``ssptk.run(**options)`` in a thread. Everything that can be checked before a process
        starts (options, the model, ``--gpus``, ``--out``) is checked here, so a mistake raises at once."""
        from ssptk.experiment.single import prepare
        from ssptk.notebook.dashboard import LiveDashboard

        prepared = prepare(model_source=model_source, **options)
        handle = cls(LiveDashboard(widget=True))
        handle._thread = threading.Thread(target=handle._work, args=(prepared, warm), name="ssptk-background-run",
                                          daemon=True)
        handle._thread.start()
        return handle

    def _work(self, prepared: Any, warm: bool) -> None:
        from ssptk.experiment.single import execute

        try:
            self.result = execute(prepared, observer=self.dashboard, cancel=self._cancel, raise_on_failure=False,
                                  warm=warm)
        except KeyboardInterrupt:
            self.interrupted = True
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            self.error = e

    @property
    def widget(self) -> Any:
        return self.dashboard.widget

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the run ends; its RunResult (``None`` if stopped). Raises its failure."""
        if self._thread is not None:
            self._thread.join(timeout)
        if not self.done:
            raise TimeoutError(f"the run is still going after {timeout} s")
        if self.error is not None:
            raise self.error
        if self.result is not None and self.result.failure is not None:
            raise RunFailed(self.result.failure, self.result)
        return self.result

    def stop(self, timeout: float = 30.0) -> None:
        """End the run now (its tasks are stopped; the logs and summary of what ran are kept)."""
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout)

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
        return f"<BackgroundRun {state}>"


def _cell_number() -> int | None:
    """The execution count of the cell IPython is running (``None`` outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else int(shell.execution_count)
