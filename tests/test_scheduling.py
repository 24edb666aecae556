"""Job-shop scheduling on job-shop-lib: the mask is the package's legality, episodes end in schedules its checks
accept, the rules and CP-SAT run through it, MaskablePPO learns without an illegal move, and bad input gets one
line that says the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from job_shop_lib import Schedule, ScheduledOperation
from job_shop_lib.benchmarking import load_benchmark_instance
from job_shop_lib.dispatching import create_composite_operation_filter
from job_shop_lib.dispatching.rules import dispatching_rule_factory
from job_shop_lib.graphs import build_disjunctive_graph
from job_shop_lib.reinforcement_learning import SingleJobShopGraphEnv

import torchrl_mask
from torchrl_mask.scheduling import (
    build_model,
    check_instance,
    cp_sat_makespan,
    evaluate,
    make_env,
    plot_gantt,
    rule_makespans,
    schedule_is_valid,
)
from torchrl_mask.scheduling.defaults import load_hyperparams
from torchrl_mask.scheduling.env import DEFAULT_READY_FILTER
from torchrl_mask.scheduling.evaluation import RULES


def _random_episode(instance: str, seed: int) -> tuple[torchrl_mask.scheduling.JobShopEnv, float]:
    env = make_env(instance)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    done, total = False, 0.0
    while not done:
        _, reward, done, _, _ = env.step(rng.choice(np.flatnonzero(env.action_masks())))
        total += float(reward)
    return env, total


@pytest.mark.parametrize("instance", ["ft06", "la01"])
def test_mask_equals_the_legal_moves_of_job_shop_libs_own_env_step_by_step(instance: str) -> None:
    # job-shop-lib's SingleJobShopGraphEnv, with the same ready-operations filters, lists the legal
    # (operation, machine, job) triples after every step; both envs take the same random legal jobs.
    ours = make_env(instance)
    theirs = SingleJobShopGraphEnv(
        build_disjunctive_graph(load_benchmark_instance(instance)),
        feature_observer_configs=["duration"],
        ready_operations_filter=create_composite_operation_filter(list(DEFAULT_READY_FILTER)),
    )
    _, info = ours.reset(seed=0)
    _, their_info = theirs.reset(seed=0)
    rng = np.random.default_rng(0)
    done = False
    while not done:
        legal_jobs = sorted({job for _, _, job in their_info["available_operations_with_ids"]})
        assert np.flatnonzero(ours.action_masks()).tolist() == legal_jobs
        assert np.array_equal(info["action_mask"], ours.action_masks())
        job = int(rng.choice(legal_jobs))
        _, _, done, _, info = ours.step(job)
        _, _, their_done, _, their_info = theirs.step((job, -1))
        assert done == their_done
    assert info["makespan"] == theirs.current_makespan()


@pytest.mark.parametrize("instance", ["ta01", "random:6x4", "random:5x5:3"])
def test_random_legal_episode_ends_in_a_schedule_job_shop_lib_accepts(instance: str) -> None:
    env, total = _random_episode(instance, seed=1)
    schedule = env.schedule
    assert schedule.is_complete() and schedule_is_valid(schedule)
    Schedule.check_schedule(schedule.schedule)  # raises ValidationError on an overlap
    # the return is the makespan over the initial lower bound, less one, negated
    assert total == pytest.approx(-(schedule.makespan() / env.features.initial_bound - 1))
    assert schedule.makespan() >= env.features.initial_bound


def test_schedule_is_valid_rejects_an_overlap_and_an_incomplete_schedule() -> None:
    env, _ = _random_episode("ft06", seed=0)
    machine = max(env.schedule.schedule, key=len)
    first, second = machine[0], machine[1]
    broken = env.schedule.copy()
    broken.schedule[first.machine_id][1] = ScheduledOperation(second.operation, first.start_time, second.machine_id)
    assert not schedule_is_valid(broken)
    partial = make_env("ft06")
    partial.reset()
    partial.step(int(np.flatnonzero(partial.action_masks())[0]))
    assert not schedule_is_valid(partial.schedule)


@pytest.mark.parametrize("instance", ["ft06", "la01"])
def test_each_rule_played_through_the_env_gives_the_rules_own_makespan(instance: str) -> None:
    # The env's legal moves are those job-shop-lib's DispatchingRuleSolver chooses among: a rule's pick is always
    # allowed, and the schedule it builds through the env is the solver's.
    expected = rule_makespans(instance)
    for name, rule in RULES.items():
        env = make_env(instance)
        env.reset()
        pick = dispatching_rule_factory(rule)
        while not env.schedule.is_complete():
            job = pick(env.dispatcher).job_id
            assert env.action_masks()[job]
            env.step(job)
        assert env.schedule.makespan() == expected[name], name


def test_cp_sat_reaches_the_known_optimum_of_ft06() -> None:
    makespan, status = cp_sat_makespan("ft06", seconds=20)
    assert (makespan, status) == (check_instance("ft06").upper_bound, "optimal")


def test_gantt_chart_is_written_as_a_png(tmp_path: Path) -> None:
    env, _ = _random_episode("ft06", seed=0)
    path = plot_gantt(env.schedule, tmp_path / "ft06.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_random_spec_draws_a_new_instance_per_reset_and_a_seeded_one_stays() -> None:
    env = make_env("random:4x3")
    env.reset(seed=0)
    first = env.instance.duration_matrix
    env.reset()
    assert env.instance.duration_matrix != first
    env.reset(seed=0)
    assert env.instance.duration_matrix == first
    fixed = make_env("random:4x3:5")
    fixed.reset(seed=0)
    drawn = fixed.instance.duration_matrix
    fixed.reset(seed=1)
    assert fixed.instance.duration_matrix == drawn


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: check_instance("ta99"), r"unknown job-shop instance 'ta99': .*ta01-ta80"),
        (lambda: make_env("random:15"), r"not a random-instance spec: write random:JOBSxMACHINES"),
        (lambda: check_instance("ta41", num_jobs=15), r"ta41 has 30 jobs, .* for 15 .* pick an instance with 15"),
    ],
)
def test_bad_input_gets_one_line_naming_the_fix(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_illegal_job_is_refused_with_the_legal_ones() -> None:
    env = make_env("ft06")
    env.reset()
    env.step(0)
    illegal = int(np.flatnonzero(~env.action_masks())[0])
    with pytest.raises(ValueError, match=rf"job {illegal} is not a legal move now \(legal: \["):
        env.step(illegal)


def test_without_the_extra_each_entry_point_says_how_to_install_it() -> None:
    # job_shop_lib set to None in sys.modules makes every import of it fail, as if it were not installed.
    code = (
        "import sys; sys.modules['job_shop_lib'] = None\n"
        "import torchrl_mask.scheduling as s\n"
        "for name in ('make_env', 'check_instance', 'evaluate'):\n"
        "    try:\n"
        "        getattr(s, name)('ta01') if name == 'check_instance' else getattr(s, name)\n"
        "    except ImportError as err:\n"
        "        print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 3
    assert all("pip install 'torchrl-mask[scheduling]'" in line for line in lines), out


def test_every_defaults_entry_builds_its_maskable_ppo() -> None:
    for name, entry in load_hyperparams().items():
        instance = "random:6x6" if name == "random" else "ft06" if name == "default" else name
        model, n_timesteps = build_model(instance, seed=0)
        assert n_timesteps == entry["n_timesteps"] and model.n_envs == entry["n_envs"]
        assert (model.n_steps, model.batch_size, model.gamma) == (entry["n_steps"], entry["batch_size"], entry["gamma"])
        assert type(model.policy).__name__ == entry["policy"]
        assert model.policy.hidden == entry["policy_kwargs"]["hidden"]
        if str(entry["learning_rate"]).startswith("lin_"):
            start = float(entry["learning_rate"][4:])
            assert (model.learning_rate(1.0), model.learning_rate(0.5)) == (start, start / 2)


@pytest.mark.slow
@pytest.mark.parametrize("instance", ["ft06", "random:6x6"])
def test_short_learn_takes_no_illegal_action_and_gives_a_valid_makespan(instance: str) -> None:
    # The env refuses an illegal job (ValueError), so a learn() that finishes took none.
    model, _ = build_model(instance, seed=0, n_envs=2, n_steps=72, batch_size=72)
    model.learn(2_000)
    result = evaluate(model, "ft06" if instance == "ft06" else "random:6x6:0", seed=0)
    assert result["all_legal"] and result["valid"] and result["steps"] == 36
    spec = check_instance("ft06")
    if instance == "ft06":
        assert spec.lower_bound is not None and result["makespan"] >= spec.lower_bound
        assert result["gap"] == pytest.approx(result["makespan"] / spec.upper_bound - 1)
    else:
        assert result["gap"] is None and result["makespan"] > 0


def test_job_scorer_scores_each_job_from_its_own_row_whatever_its_position(tmp_path: Path) -> None:
    # Permuting the jobs' rows permutes the logits the same way (one network scores every job); the value is the
    # same. Saved and loaded, the policy keeps its width and gives the same logits.
    model, _ = build_model("ft06", seed=0, n_envs=1, policy_kwargs={"hidden": 16})
    env = make_env("ft06")
    obs, _ = env.reset()
    env.step(0)
    obs = env.step(3)[0]
    order = np.random.default_rng(0).permutation(obs.shape[0])
    policy = model.policy
    with torch.no_grad():
        batch = torch.as_tensor(np.stack([obs, obs[order]]))
        latent = policy.features_extractor(batch)
        logits, value_latent = policy.mlp_extractor(latent)
        values = policy.value_net(value_latent)
    assert torch.allclose(logits[1], logits[0][order], atol=1e-6)
    assert torch.allclose(values[0], values[1], atol=1e-6)
    model.save(tmp_path / "model.zip")
    loaded = torchrl_mask.MaskablePPO.load(tmp_path / "model.zip", device="cpu")
    assert loaded.policy.hidden == 16
    with torch.no_grad():
        again, _ = loaded.policy.mlp_extractor(loaded.policy.features_extractor(batch))
    assert torch.equal(again, logits)


def test_the_env_runs_under_torchrl_with_its_mask_as_the_action_mask_entry() -> None:
    # masked_gym_env (what TorchRL's collectors step) reads the env's action_masks(); a policy that draws among
    # the legal jobs finishes the schedule in one episode of jobs x machines steps.
    env = torchrl_mask.masked_gym_env(make_env("ft06"))

    def legal_policy(td):  # type: ignore[no-untyped-def]
        td["action"] = torch.multinomial(td["action_mask"].float(), 1).squeeze(-1)
        return td

    rollout = env.rollout(100, legal_policy, break_when_any_done=True)
    assert rollout.shape == (36,) and bool(rollout["next", "done"][-1])
    assert rollout["action_mask"][0].all()  # every job may start at time 0
    assert float(rollout["next", "episode_reward"][-1]) < 0
