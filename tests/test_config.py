"""``torchrl-mask train``'s configuration: rl-zoo3's hyperparameter values and files, read and checked in process."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from torchrl_mask.app.conf_file import load_conf_file
from torchrl_mask.app.hyperparams import UsageError, check_hyperparams, check_minibatches, parse_hyperparam


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("learning_rate=3e-4", ("learning_rate", 3e-4)),
        ("n_epochs:5", ("n_epochs", 5)),  # rl-zoo3's separator
        ("target_kl=None", ("target_kl", None)),
        ("normalize_advantage=False", ("normalize_advantage", False)),
        ("clip_range=lin_0.2", ("clip_range", "lin_0.2")),  # not a literal: kept as text, as rl-zoo3 parses it
        ("policy=MlpPolicy", ("policy", "MlpPolicy")),
        (
            "policy_kwargs=dict(net_arch=dict(pi=[64], vf=[32]), activation_fn=th.nn.Tanh, ortho_init=False)",
            (
                "policy_kwargs",
                {"net_arch": {"pi": [64], "vf": [32]}, "activation_fn": "th.nn.Tanh", "ortho_init": False},
            ),
        ),
        (
            "policy_kwargs={'net_arch': [8, 8], 'ortho_init': True}",
            ("policy_kwargs", {"net_arch": [8, 8], "ortho_init": True}),
        ),
    ],
)
def test_hyperparam_values_are_read_as_rl_zoo_reads_them(text: str, expected: tuple[str, object]) -> None:
    assert parse_hyperparam(text) == expected


@pytest.mark.parametrize(
    "text", ["policy_kwargs=dict(net_arch=open('x'))", "policy_kwargs=dict(**other)", "=3", "learning rate=3"]
)
def test_hyperparams_that_are_code_or_not_name_value_are_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_hyperparam(text)


def test_checked_values_are_whole_numbers_and_parsed_policy_kwargs() -> None:
    checked = check_hyperparams(
        {"n_timesteps": 1e5, "learning_rate": "1e-3", "policy_kwargs": "dict(net_arch=[16])", "gamma": 1},
        "test",
    )
    assert checked == {"n_timesteps": 100_000, "learning_rate": 1e-3, "policy_kwargs": {"net_arch": [16]}, "gamma": 1}
    assert isinstance(checked["n_timesteps"], int)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"n_steps": 2.5}, "n_steps=2.5 is not valid; expected a positive integer"),
        ({"batch_size": True}, "batch_size=True is not valid"),
        ({"clip_range": "lin_-1"}, "expected a number > 0 or lin_<number > 0>"),
        ({"target_kl": 0}, "expected None or a number > 0"),
        ({"policy": "LstmPolicy"}, "expected one of MlpPolicy, MultiInputPolicy, CnnPolicy"),
        ({"policy_kwargs": {"activation_fn": "relu"}}, "activation_fn names a torch.nn class"),
        ({"frame_stack": 4}, "rl-zoo3's 'frame_stack' is not supported here"),
        ({"n_step": 64}, "unknown hyperparameter 'n_step'; torchrl-mask train takes n_timesteps, n_envs"),
    ],
)
def test_bad_names_and_values_are_named_with_what_is_expected(values: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=r"^test: ") as caught:
        check_hyperparams(values, "test")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_gives_the_env_entry_else_its_default(tmp_path: Path) -> None:
    path = tmp_path / "ppo_mask.yml"
    path.write_text(
        textwrap.dedent(
            """
            default:
              n_timesteps: !!float 1e4
              policy: 'MlpPolicy'
            Taxi-v4:
              n_timesteps: !!float 2e5
              n_envs: 4
              learning_rate: lin_2.5e-4
            """
        )
    )
    assert load_conf_file(path, "Taxi-v4") == ({"n_timesteps": 200_000, "n_envs": 4, "learning_rate": "lin_2.5e-4"}, {})
    assert load_conf_file(path, "FrozenLake-v1") == ({"n_timesteps": 10_000, "policy": "MlpPolicy"}, {})


@pytest.mark.parametrize(
    ("n_steps", "n_envs", "batch_size", "normalize", "message"),
    [
        (65, 1, 64, True, "leaves a last minibatch of one row"),
        (64, 1, 1, False, "use batch_size >= 2"),
        (2**20, 32, 64, True, "rows of rollout, above the 16,777,216 held in memory"),
    ],
)
def test_a_minibatch_of_one_row_or_a_rollout_too_big_is_refused(
    n_steps: int, n_envs: int, batch_size: int, normalize: bool, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        check_minibatches(n_steps, n_envs, batch_size, normalize)


def test_a_last_minibatch_of_one_row_passes_without_advantage_normalisation() -> None:
    check_minibatches(65, 1, 64, normalize_advantage=False)
    check_minibatches(64, 2, 64)


def test_a_run_without_out_gets_a_new_dated_folder_named_after_its_env() -> None:
    from torchrl_mask.app.config import TrainConfig
    from torchrl_mask.app.tune_args import TuneConfig

    game = TrainConfig("pettingzoo:tictactoe_v3").output_dir().as_posix()
    assert re.fullmatch(r"runs/pettingzoo_tictactoe_v3-\d{8}-\d{6}", game), game
    study = TuneConfig("my_pkg:Env-v0").output_dir().as_posix()
    assert re.fullmatch(r"runs/tune-my_pkg_Env-v0-\d{8}-\d{6}", study), study
    assert TrainConfig(out=Path("here")).output_dir() == Path("here")
