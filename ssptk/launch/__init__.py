"""The launcher: the processes of a local run, started, followed and stopped from the user's process.

:class:`~ssptk.launch.cluster.LocalCluster` is the one owner of a cluster's task processes (and
:class:`~ssptk.launch.shared.SharedCluster` its one-process form, ``--layout shared``); around it: the
private network namespace (:mod:`~ssptk.launch.netns`), GPU assignment (:mod:`~ssptk.launch.gpus`), the warm
pool a notebook reuses (:mod:`~ssptk.launch.warm`), the supervisor that follows a run and returns a typed
``Outcome`` (:mod:`~ssptk.launch.supervisor`), the observer protocol (:mod:`~ssptk.launch.observers`), the
predicting process (:mod:`~ssptk.launch.predictor`) and the launcher's temp directories.

What runs inside a task is :mod:`ssptk.runtime`'s; which layers this one may import is in CONTRIBUTING.md.
Importing the package imports none of its modules.
"""
