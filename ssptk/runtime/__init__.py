"""The task runtime: what runs inside a TensorFlow task (``python -m ssptk.worker``), on a local cluster or on hosts a
user or a cluster manager started.

:mod:`~ssptk.runtime.task` is the entry point: it takes its cluster from the command line or from the environment
(``TF_CONFIG``, Slurm: :mod:`~ssptk.runtime.cluster_env`), builds the parameter-server graph
(:mod:`~ssptk.runtime.ps_graph`; local SGD's: :mod:`~ssptk.runtime.local_graph`; delay compensation:
:mod:`~ssptk.runtime.delay_comp`) and runs its mode's loop (:mod:`~ssptk.runtime.ps_loop`,
:mod:`~ssptk.runtime.local_loop`, or :mod:`~ssptk.runtime.allreduce`), each step through a step callable
(:mod:`~ssptk.runtime.fastrun`) and into the worker's log (:mod:`~ssptk.runtime.recorder`).
:mod:`~ssptk.runtime.shared_layout` holds every task of the shared layout in one process;
:mod:`~ssptk.runtime.predict_task` runs predicted runs (the simulator's schedule replayed with gradients from
:mod:`~ssptk.runtime.gradients`); :mod:`~ssptk.runtime.protocol` is what a task tells its launcher; the rest keeps a
task safe (its user code's processes reaped, duplicate requests re-run, TensorFlow imported without Keras 3). The
options, models and injected delays a task uses are :mod:`ssptk.core`'s, the run directory it writes into
:mod:`ssptk.rundir`'s.
"""
