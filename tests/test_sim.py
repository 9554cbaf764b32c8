"""Tests of the discrete-event simulator (pure Python, no TensorFlow, fixed seeds)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import ideal

from ssptk.core.delays import DelayModel, parse_jitter
from ssptk.core.errors import UsageError
from ssptk.sim import COLUMNS, SimResult, calibrate_overhead, expected_sync_update_time, harmonic, simulate

M = 1.0  # mean of the exponential jitter: the only step cost in the theory tests
REL = 0.03  # "within a few percent"


def per_update(r: SimResult) -> float:
    return r.wall_s / r.updates


# ---------------------------------------------------------------- theory: sync, backup, async


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_sync_update_time_is_mean_times_harmonic(n: int) -> None:
    r = simulate("sync", n, 10000, jitter=f"exp:{M}", seed=1)
    assert r.updates == 10000
    assert per_update(r) == pytest.approx(M * harmonic(n), rel=REL)


@pytest.mark.parametrize("n,b", [(2, 1), (3, 1), (4, 2), (5, 2), (5, 4)])
def test_backup_abandon_is_dutta_ksync(n: int, b: int) -> None:
    r = simulate("sync", n, 20000, backup=b, jitter=f"exp:{M}", seed=2, late="abandon")
    expected = M * (harmonic(n) - harmonic(b))
    assert expected_sync_update_time(n, b, M, late="abandon") == pytest.approx(expected)
    assert per_update(r) == pytest.approx(expected, rel=REL)
    assert r.late == "abandon"
    # each update used exactly the fastest n-b, from distinct workers; abandoned work leaves no record
    assert len(r.steps) == (n - b) * 20000 and r.steps["applied"].all()
    assert (r.steps.groupby("global_step")["worker"].nunique() == n - b).all()


@pytest.mark.parametrize("n,b", [(2, 1), (3, 1), (4, 2), (5, 2), (5, 4)])
def test_backup_drop_between_abandon_and_full_sync_and_matches_theory(n: int, b: int) -> None:
    k = 20000
    r = simulate("sync", n, k, backup=b, jitter=f"exp:{M}", seed=3)  # late="drop" is the default
    assert r.late == "drop"
    theory = expected_sync_update_time(n, b, M)  # (n-b)-th arrival of n-b Exp and b Erlang-2 clocks
    abandon, full = M * (harmonic(n) - harmonic(b)), M * harmonic(n)
    assert abandon < theory < full
    assert per_update(r) == pytest.approx(theory, rel=REL)
    assert abandon * (1 - REL) <= per_update(r) <= full * (1 + REL)

    df = r.steps
    applied = df[df["applied"]]
    assert r.updates == k and applied["global_step"].max() == k
    per_step = applied.groupby("global_step")["worker"]
    assert (per_step.size() == n - b).all() and (per_step.nunique() == n - b).all()
    assert (applied["staleness"] == 0).all()
    dropped = df[~df["applied"]]
    assert len(dropped) > 0 and (dropped["staleness"] >= 1).all() and (dropped["wait_s"] == 0).all()
    # dropped minibatches are still computed: every index appears once, numbered as the engine numbers them
    # (the global step the worker started at, times N, plus the worker)
    assert df["minibatch"].is_unique
    started_at = np.where(df["applied"], df["global_step"] - 1, df["global_step"] - df["staleness"])
    assert (df["minibatch"] == started_at * n + df["worker"]).all()


def test_drop_theory_small_cases() -> None:
    assert expected_sync_update_time(2, 1, 1.0) == pytest.approx(0.75)  # 1/2 + 1/4
    assert expected_sync_update_time(3, 1, 1.0) == pytest.approx(10 / 9)
    assert expected_sync_update_time(4, 0, 2.0) == pytest.approx(2.0 * harmonic(4))


def _reference_drop(n: int, b: int, updates: int, straggler: dict, jitter: str, seed: int) -> list[tuple]:
    """A deliberately naive re-statement of the late="drop" rule (linear scans, no heap)."""
    models = [DelayModel(i, straggler, parse_jitter(jitter), seed) for i in range(n)]
    g, busy, out, arrived = 0, {}, [], []  # busy: worker -> (finish time, parameter version read)
    for i in range(n):
        busy[i] = (models[i].next(), 0)
    while busy:
        i = min(busy, key=lambda w: busy[w][0])
        t, version = busy.pop(i)
        if g < updates and version == g:
            arrived.append(i)
            if len(arrived) == n - b:
                g += 1
                out += [(t, w, g, True) for w in arrived]
                if g < updates:
                    busy.update({w: (t + models[w].next(), g) for w in arrived})
                arrived = []
        else:
            out.append((t, i, g, False))
            if g < updates:
                busy[i] = (t + models[i].next(), g)
    return out


@pytest.mark.parametrize("n,b", [(3, 1), (4, 2), (5, 1)])
def test_drop_matches_naive_reference(n: int, b: int) -> None:
    straggler, jitter = {0: 0.3}, "exp:1"
    r = simulate("sync", n, 300, backup=b, straggler=straggler, jitter=jitter, seed=5)
    got = list(zip(r.steps["t"], r.steps["worker"], r.steps["global_step"], r.steps["applied"]))
    assert got == _reference_drop(n, b, 300, straggler, jitter, 5)


def test_drop_late_worker_on_current_step_contributes() -> None:
    r = simulate("sync", 3, 3000, backup=1, straggler={2: 0.3}, jitter="exp:1", seed=5)
    w2 = r.steps[r.steps["worker"] == 2].sort_values("step")
    # after a dropped gradient the worker restarts on the current step; if it finishes while that
    # step still needs gradients, it counts
    prev_dropped = ~w2["applied"].shift(1, fill_value=True).astype(bool)
    assert (prev_dropped & w2["applied"]).any()
    # everyone whose gradient counted for a step sees the same update time
    applied = r.steps[r.steps["applied"]]
    assert (applied.groupby("global_step")["t"].nunique() == 1).all()


@pytest.mark.parametrize("n", [1, 2, 4])
def test_async_updates_per_second_is_n_over_mean(n: int) -> None:
    r = simulate("async", n, 20000 // n, jitter=f"exp:{M}", seed=4)
    assert r.updates == r.total_steps == n * (20000 // n)
    assert r.updates_per_s == pytest.approx(n / M, rel=REL)
    assert r.wait_fraction == 0 and (r.steps["wait_s"] == 0).all()


# ---------------------------------------------------------------- SSP


def test_ssp_throughput_rises_with_staleness_from_sync_to_async() -> None:
    n, k, jit = 3, 20000 // 3, f"exp:{M}"
    sync = simulate("sync", n, k, jitter=jit, seed=6)
    asyn = simulate("async", n, k, jitter=jit, seed=6)
    rates = [simulate("ssp", n, k, staleness=s, jitter=jit, seed=6).steps_per_s for s in (0, 1, 2, 4, 8, 32)]
    assert all(b >= a * (1 - 0.005) for a, b in zip(rates, rates[1:]))
    assert rates[-1] == pytest.approx(asyn.steps_per_s, rel=REL)
    assert rates[0] < 0.6 * asyn.steps_per_s

    # SSP(0) is a barrier after every step, so its *minibatch* rate is exactly sync's (same delays,
    # same schedule); but every gradient is its own update (n times sync's update rate), and the j-th
    # finisher of a round has seen the j-1 updates before it, so staleness is 0..n-1, not 0.
    ssp0 = simulate("ssp:0", n, k, jitter=jit, seed=6)
    assert ssp0.wall_s == pytest.approx(sync.wall_s, rel=1e-12)
    assert ssp0.steps_per_s == pytest.approx(sync.steps_per_s, rel=1e-12)
    assert ssp0.updates_per_s == pytest.approx(n * sync.updates_per_s, rel=1e-12)
    hist = ssp0.staleness_hist()
    assert list(hist.index) == list(range(n)) and (hist == k).all()
    assert (sync.steps["staleness"] == 0).all()


@pytest.mark.parametrize("s", [0, 1, 2, 4, 8])
def test_ssp_skew_bound_under_heavy_straggler(s: int) -> None:
    kw = dict(straggler={0: 0.05}, jitter="exp:0.01", seed=7)
    r = simulate("ssp", 4, 500, staleness=s, **kw)
    assert r.max_skew <= s + 1
    assert r.max_skew == s + 1  # the straggler makes the bound tight
    tl = r.skew_timeline()
    assert list(tl.columns) == ["t", "skew"] and tl["skew"].max() == r.max_skew
    assert tl["t"].iloc[0] == 0 and tl["t"].is_monotonic_increasing
    asyn = simulate("async", 4, 500, **kw)
    assert asyn.max_skew > 10 * (8 + 1)


def test_ssp_blocked_time_is_wait() -> None:
    r = simulate("ssp", 3, 1000, staleness=1, straggler={1: 0.05}, jitter="exp:0.01", seed=8)
    assert r.wait_fraction > 0.3
    fast = r.steps[r.steps["worker"] == 0].sort_values("step")
    # each step lasts delay after its start; start = previous record's t + wait
    start = fast["t"].shift(1, fill_value=0.0) + fast["wait_s"]
    assert np.allclose(fast["t"], start + fast["delay_s"])


# ---------------------------------------------------------------- budget rules


@pytest.mark.parametrize("mode,kw", [("async", {}), ("ssp", {"staleness": 2}), ("ssp", {"staleness": 0})])
def test_shared_budget_async_ssp(mode: str, kw: dict) -> None:
    n, k = 3, 400
    r = simulate(mode, n, k, straggler={2: 0.02}, jitter="exp:0.01", seed=9, **kw)
    assert r.total_steps == len(r.steps) == n * k
    assert sorted(r.steps["minibatch"]) == list(range(n * k))
    counts = r.steps["worker"].value_counts()
    if kw.get("staleness") != 0:
        assert counts[0] > counts[2]  # faster workers do more
    for _, g in r.steps.groupby("worker"):
        assert list(g["step"]) == list(range(1, len(g) + 1))
    assert list(r.steps["global_step"]) == list(range(1, n * k + 1))


def test_sync_no_backup_budget_is_per_worker() -> None:
    n, k = 4, 300
    r = simulate("sync", n, k, straggler={1: 0.02}, jitter="exp:0.01", seed=10)
    assert (r.steps["worker"].value_counts() == k).all()
    assert sorted(r.steps["minibatch"]) == list(range(n * k))
    assert r.updates == k and r.steps["applied"].all()
    assert (r.steps["step"] == r.steps["global_step"]).all()
    assert r.max_skew == 1  # as a real sync run's summary says: an update's records come one after another


def test_sync_backup_budget_is_updates() -> None:
    r = simulate("sync", 4, 300, backup=1, straggler={1: 0.02}, jitter="exp:0.01", seed=10)
    assert r.updates == 300 and int(r.steps["applied"].sum()) == 3 * 300
    assert r.total_steps == len(r.steps) >= 3 * 300


def test_allreduce_is_modelled_as_sync() -> None:
    a = simulate("allreduce", 3, 200, jitter="exp:0.01", seed=11)
    s = simulate("sync", 3, 200, jitter="exp:0.01", seed=11)
    assert a.mode == "allreduce"
    pd.testing.assert_frame_equal(a.steps, s.steps)


# ---------------------------------------------------------------- determinism and delay streams


@pytest.mark.parametrize("mode,kw", [("async", {}), ("ssp", {"staleness": 1}), ("sync", {}),
                                     ("sync", {"backup": 1}), ("sync", {"backup": 1, "late": "abandon"})])
def test_same_seed_same_result_other_seed_differs(mode: str, kw: dict) -> None:
    args = dict(straggler=[(0, 0.01)], jitter="exp:0.01", overhead=0.001, **kw)
    a = simulate(mode, 3, 200, seed=12, **args)
    b = simulate(mode, 3, 200, seed=12, **args)
    c = simulate(mode, 3, 200, seed=13, **args)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert a.wall_s == b.wall_s and a.max_skew == b.max_skew
    assert not a.steps["delay_s"].equals(c.steps["delay_s"]) and a.wall_s != c.wall_s


@pytest.mark.parametrize("mode,kw", [("async", {}), ("ssp", {"staleness": 1}), ("sync", {}),
                                     ("sync", {"backup": 1})])
def test_record_delays_are_the_delay_model_stream(mode: str, kw: dict) -> None:
    straggler, jitter, seed = {1: 0.02}, "uniform:0.001:0.03", 14
    r = simulate(mode, 3, 300, straggler=straggler, jitter=jitter, seed=seed, overhead=0.002, **kw)
    for w, g in r.steps.groupby("worker"):
        want = DelayModel(int(w), straggler, parse_jitter(jitter), seed).take(len(g))
        assert np.array_equal(g.sort_values("step")["delay_s"].to_numpy(), want)


def test_records_have_run_directory_columns() -> None:
    r = simulate("ssp", 2, 50, staleness=1, jitter="exp:0.01")
    assert tuple(r.steps.columns) == COLUMNS
    assert r.steps["loss"].isna().all() and r.steps["applied"].dtype == bool
    assert r.steps["t"].is_monotonic_increasing and r.wall_s == r.steps["t"].max()
    assert r.steps_per_s == pytest.approx(r.total_steps / r.wall_s)
    assert r.wait_fraction == pytest.approx(r.steps["wait_s"].sum() / (2 * r.wall_s))


def test_ssp_mode_string() -> None:
    a = simulate("ssp:4", 3, 100, jitter="exp:0.01")
    b = simulate("ssp", 3, 100, staleness=4, jitter="exp:0.01")
    assert a.mode == "ssp" and a.bound == 4
    pd.testing.assert_frame_equal(a.steps, b.steps)


# ---------------------------------------------------------------- staleness


def test_sync_staleness_is_zero() -> None:
    r = simulate("sync", 4, 500, jitter="exp:0.01", straggler={3: 0.01}, seed=15)
    assert (r.steps["staleness"] == 0).all()
    assert list(r.staleness_hist().index) == [0]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_async_equal_workers_see_n_minus_1_updates(n: int) -> None:
    r = simulate("async", n, 100, compute=0.01)
    later = r.steps[r.steps["step"] >= 2]
    assert (later["staleness"] == n - 1).all()
    first = r.steps[r.steps["step"] == 1].sort_values("worker")
    assert list(first["staleness"]) == list(range(n))  # first round: the j-th update saw j-1 before it
    assert r.staleness_hist().sum() == r.total_steps


# ---------------------------------------------------------------- calibration and helpers


def test_calibrate_overhead_recovers_simulated_overhead() -> None:
    r = simulate("async", 3, 300, jitter="exp:0.01", straggler={0: 0.005}, overhead=0.003, seed=16)
    assert calibrate_overhead(r.steps, 3) == pytest.approx(0.003, abs=1e-9)
    events = pd.DataFrame({"event": ["start"], "t": [0.0], "worker": [0]})
    with_events = pd.concat([r.steps.assign(event=np.nan), events], ignore_index=True)
    assert calibrate_overhead(with_events, 3) == pytest.approx(0.003, abs=1e-9)
    with pytest.raises(UsageError, match="delay_s"):
        calibrate_overhead(r.steps.drop(columns="delay_s"), 3)


def test_harmonic() -> None:
    assert harmonic(0) == 0 and harmonic(1) == 1 and harmonic(4) == pytest.approx(25 / 12)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("call,match", [
    (lambda: simulate("bsp", 2, 10), "unknown mode"),
    (lambda: simulate("ssp", 2, 10, staleness=-1), "staleness must be"),
    (lambda: simulate("ssp:x", 2, 10), "bad mode"),
    (lambda: simulate("ssp:-2", 2, 10), "bad mode"),
    (lambda: simulate("ssp:2", 2, 10, staleness=3), "conflicts"),
    (lambda: simulate("async", 2, 10, staleness=1), "applies to ssp only"),
    (lambda: simulate("sync", 2, 10, staleness=0), "applies to ssp only"),
    (lambda: simulate("sync", 0, 10), "workers must be"),
    (lambda: simulate("sync", 2, 0), "steps must be"),
    (lambda: simulate("sync", 2, 2.5), "steps must be"),
    (lambda: simulate("sync", 2, 10, backup=2), "backup must be"),
    (lambda: simulate("sync", 2, 10, backup=-1), "backup must be"),
    (lambda: simulate("async", 2, 10, backup=1), "--backup applies to sync and local only"),
    (lambda: simulate("ssp:1", 3, 10, backup=1), "--backup applies to sync and local only"),
    (lambda: simulate("sync", 3, 10, backup=1, late="ignore"), "late must be"),
    (lambda: simulate("sync", 3, 10, straggler={5: 0.1}), "out of range"),
    (lambda: simulate("sync", 3, 10, straggler=[(0, -1.0)]), "straggler"),
    (lambda: simulate("sync", 3, 10, jitter="gauss:1"), "jitter"),
    (lambda: simulate("sync", 3, 10, overhead=-0.1), "overhead must be"),
    (lambda: simulate("sync", 3, 10, compute=float("nan")), "compute must be"),
    (lambda: harmonic(-1), "harmonic"),
])
def test_validation(call, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        call()


def test_validation_messages_are_one_line() -> None:
    for call in (lambda: simulate("bsp", 2, 10), lambda: simulate("sync", 2, 10, backup=5)):
        with pytest.raises(UsageError) as info:
            call()
        assert "\n" not in str(info.value)


def test_calibration_recovers_the_overhead_of_a_simulated_run_in_every_mode() -> None:
    """Calibrating on a run's own records (delay and wait subtracted) gives back the overhead it had,
    and the simulator's ideal for those options is then that run's own throughput."""
    from ssptk.sim import calibrate_overhead, simulate

    for mode, staleness in (("async", None), ("ssp", 1), ("sync", None)):
        run = simulate(mode, 3, 400, staleness=staleness, straggler={2: 0.004}, jitter="exp:0.002", seed=5,
                       overhead=0.003)
        assert calibrate_overhead(run.steps, 3) == pytest.approx(0.003, rel=0.02)
        predicted = ideal(run.steps, mode, 3, 400, staleness=staleness, straggler={2: 0.004}, jitter="exp:0.002",
                          seed=5)
        assert predicted["ideal_steps_per_s"] == pytest.approx(run.steps_per_s, rel=0.02)


def test_pause_jitter_holds_a_share_of_steps_exactly_that_long() -> None:
    """``pause:P:S``: about P of the steps get S extra seconds, the rest none; the same stream as real runs."""
    j = parse_jitter("pause:0.1:0.5")
    assert (j.mean, j.longest, str(j)) == (0.05, 0.5, "pause:0.1:0.5")
    d = DelayModel(0, None, j, seed=3).take(20000)
    assert set(np.unique(d)) == {0.0, 0.5}
    assert abs((d > 0).mean() - 0.1) < 0.01
    again = DelayModel(0, None, j, seed=3).take(20000)
    assert np.array_equal(d, again)


def test_pauses_cost_sync_every_pause_and_a_bound_absorbs_short_ones() -> None:
    """8 workers, 10 ms steps, a 50 ms pause on 5% of steps: sync waits for nearly every step's slowest
    worker, ssp:8 absorbs most pauses (about 5 steps long), async all."""
    rates = {label: simulate(label, workers=8, steps=400, jitter="pause:0.05:0.05", overhead=0.01).steps_per_s
             for label in ("sync", "ssp:1", "ssp:8", "async")}
    assert rates["sync"] < rates["ssp:1"] < rates["ssp:8"] < rates["async"], rates
    assert rates["sync"] < 0.6 * rates["async"] and rates["ssp:8"] > 0.8 * rates["async"], rates


# ---------------------------------------------------------------- no contradictions (issue 27.4)

def test_max_skew_is_what_the_analysis_measures_on_the_records_even_when_steps_take_no_time() -> None:
    """Regression: with no per-step cost, workers 0 and 1 did all 300 steps at t=0 and the skew read from the
    timeline (one row per distinct time) was 0, beside a staleness of 299."""
    from ssptk import analysis as an

    r = simulate("async", 3, 100, straggler={2: 0.03})
    assert r.steps["staleness"].max() == 299 and r.max_skew == 150 == an.max_skew(r.steps)
    cases = [("async", {"straggler": {2: 0.03}, "overhead": 0.005}), ("ssp", {"staleness": 2, "jitter": "exp:0.01"}),
             ("sync", {"jitter": "exp:0.01", "overhead": 0.001}), ("sync", {"backup": 1, "jitter": "exp:0.01"})]
    for mode, kw in cases:
        r = simulate(mode, 4, 50, **kw)
        assert r.max_skew == an.max_skew(r.steps) >= r.skew_timeline()["skew"].max(), (mode, kw)


def test_cli_timing_has_a_stated_overhead_and_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    """``ssptk sim`` without a model: a step costs the same default as a predicted run's (5 ms, not 0), and
    the output says so; the help states that default."""
    from ssptk.cli import build_parser, main
    from ssptk.experiment.predicted_runs import DEFAULT_OVERHEAD_S

    assert main(["sim", "--mode", "async", "--workers", "3", "--steps", "100", "--straggler", "2:0.03"]) == 0
    out = capsys.readouterr().out.splitlines()
    # workers 0 and 1 take 5 ms a step, worker 2 35 ms: 20 steps of its 300, 140 each for the others
    assert out[0] == "simulated async: 300 minibatches in 0.700 s = 428.6 steps/s, 428.6 updates/s"
    assert out[1] == "max skew 120, waiting 0.0% of worker time, staleness mean 1.99 max 14"
    assert out[2].startswith(f"clock: each step {1000 * DEFAULT_OVERHEAD_S:.2f} ms plus its delays (--overhead")
    assert main(["sim", "--mode", "async", "--workers", "3", "--steps", "100", "--overhead", "0"]) == 0
    assert "clock: each step 0.00 ms" in capsys.readouterr().out
    sim_help = build_parser().commands["sim"].format_help()
    assert f"(default: {DEFAULT_OVERHEAD_S}," in " ".join(sim_help.split())
    assert simulate("async", 2, 10).overhead == 0.0 and simulate("async", 2, 10, overhead=0.002).overhead == 0.002
    import ssptk

    assert ssptk.simulate("async", 2, 10).overhead == DEFAULT_OVERHEAD_S  # the API's default is the CLI's


def test_ssptk_simulate_returns_a_sim_result_always() -> None:
    """One return type: ``ssptk.simulate`` is the timing (a SimResult); a run's loss is ``ssptk.predict``'s."""
    import ssptk

    assert isinstance(ssptk.simulate("ssp:2", workers=2, steps=10), SimResult)
    with pytest.raises(UsageError, match=r"^ssptk.simulate predicts the timing only: .*ssptk.predict\("):
        ssptk.simulate("ssp:2", workers=2, steps=10, model="linear")
