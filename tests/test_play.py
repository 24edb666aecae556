"""``torchrl-mask play``: a person plays a saved self-play model in a terminal (a pseudo-terminal here, through
pexpect), and bad input ends in one line with exit status 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pexpect
import pytest

from torchrl_mask import MaskablePPO, MaskableRecurrentPPO, SeatEnv

REPO = Path(__file__).resolve().parents[1]
PROMPT = r"Your move \((.*)\)\r\n> "
RESULT = r"(You won|The model won|A draw)\."
ILLEGAL = "is not a legal move; legal: "


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An untrained model of each game, saved as a run saves it (its strength does not matter here)."""
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for game in ("tictactoe_v3", "connect_four_v3", "leduc_holdem_v4"):
        paths[game] = folder / f"{game}.zip"
        MaskablePPO("MlpPolicy", SeatEnv(game), seed=0).save(paths[game])
    paths["leduc_lstm"] = folder / "leduc_lstm.zip"
    MaskableRecurrentPPO(
        "MlpLstmPolicy", SeatEnv("leduc_holdem_v4"), policy_kwargs={"lstm_hidden_size": 8}, seed=0
    ).save(paths["leduc_lstm"])
    return paths


def _spawn(*args: str) -> pexpect.spawn:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    return pexpect.spawn(sys.executable, ["-m", "torchrl_mask", "play", *args], env=env, encoding="utf-8", timeout=60)


def _legal(child: pexpect.spawn) -> list[str]:
    return child.match.group(1).split(", ")


def _play_out(child: pexpect.spawn, choose: int = 0) -> str:
    """Answer every prompt with a legal move until the game ends; the result line."""
    while child.expect([PROMPT, RESULT]) == 0:
        child.sendline(_legal(child)[choose % len(_legal(child))])
    result = child.match.group(0)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    return result


@pytest.mark.slow
def test_a_person_plays_a_whole_game_of_tic_tac_toe_and_an_illegal_move_is_refused(models: dict[str, Path]) -> None:
    child = _spawn("--env", "pettingzoo:tictactoe_v3", "-i", str(models["tictactoe_v3"]), "--seat", "first")
    child.expect(r"You play first \(player_1\), your pieces X\.")
    child.expect(PROMPT)
    assert _legal(child) == [str(cell) for cell in range(9)]  # an empty board: every cell, numbered as shown
    child.sendline("9")  # no such cell
    child.expect(ILLEGAL + r"0, 1, 2, 3, 4, 5, 6, 7, 8\. Try again\.")
    child.sendline("4")
    child.expect(r"The model plays (\d)\.")
    taken = child.match.group(1)
    child.expect(PROMPT)
    board = child.before.split("\r\n")[-4:-1]
    assert board[1].split()[1] == "X", "the person's piece is X, in the middle cell"
    legal = _legal(child)
    assert "O" in " ".join(board) and taken not in legal and "4" not in legal
    child.sendline(taken)  # the model's cell
    child.expect(ILLEGAL)
    child.sendline("middle")  # not a move at all
    child.expect(ILLEGAL)
    child.sendline(legal[0])
    result = _play_out(child)
    assert re.fullmatch(RESULT, result)
    assert "Illegal move" not in (child.before or "")


@pytest.mark.slow
def test_connect_four_reads_a_column_from_1_to_7_and_refuses_others(models: dict[str, Path]) -> None:
    child = _spawn("--env", "pettingzoo:connect_four_v3", "-i", str(models["connect_four_v3"]), "--seat", "second")
    child.expect(r"You play second \(player_1\), your pieces O\.")
    child.expect(r"The model plays ([1-7])\.")
    column = int(child.match.group(1))
    child.expect(PROMPT)
    assert _legal(child) == [str(c) for c in range(1, 8)]
    rows = child.before.split("\r\n")
    assert rows[-2] == "1 2 3 4 5 6 7"
    assert rows[-3].split()[column - 1] == "X"  # the model's piece, at the bottom of the column it named
    for refused in ("0", "8", "c4"):
        child.sendline(refused)
        child.expect(ILLEGAL + r"1, 2, 3, 4, 5, 6, 7\. Try again\.")
    child.sendline("7")
    child.expect(PROMPT)
    assert child.before.split("\r\n")[-3].split()[6] == "O"  # the person's piece, at the bottom of column 7
    child.sendline("7")
    assert re.fullmatch(RESULT, _play_out(child, choose=3))


@pytest.mark.slow
def test_a_card_game_shows_the_hand_and_names_the_moves_and_ends_with_the_chips(models: dict[str, Path]) -> None:
    child = _spawn("--env", "pettingzoo:leduc_holdem_v4", "-i", str(models["leduc_holdem_v4"]), "--seat", "first")
    child.expect(r"Your hand: [SHDC][JQK]\r\nPublic cards: none yet\r\nChips in the pot: yours 1, the model's 2")
    child.expect(PROMPT)
    assert set(_legal(child)) <= {"call", "raise", "fold", "check"}
    child.sendline("fold")
    child.expect(r"The model won 0\.5 big blinds\.")
    child.expect(pexpect.EOF)


@pytest.mark.slow
def test_an_lstm_model_plays_a_hand_with_its_state_carried_over_its_moves(models: dict[str, Path]) -> None:
    child = _spawn("--env", "pettingzoo:leduc_holdem_v4", "-i", str(models["leduc_lstm"]), "--seat", "second")
    child.expect(r"You play second")
    child.expect(r"The model plays (call|raise|fold|check)\.")  # the model's seat opens the hand
    chips = r"(You won|The model won) [0-9.]+ big blinds\.|A split pot: nobody won chips\."
    while child.expect([PROMPT, chips]) == 0:  # the person calls or checks: the hand runs to its end
        child.sendline(next(move for move in ("check", "call") if move in _legal(child)))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "Traceback" not in (child.before or "")


@pytest.mark.slow
def test_end_of_input_and_ctrl_c_leave_the_game_in_one_line(models: dict[str, Path]) -> None:
    child = _spawn("--env", "pettingzoo:tictactoe_v3", "-i", str(models["tictactoe_v3"]), "--seat", "first")
    child.expect(PROMPT)
    child.sendeof()
    child.expect(r"\r\nInput ended; the game is left unfinished\.\r\n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    child = _spawn("--env", "pettingzoo:tictactoe_v3", "-i", str(models["tictactoe_v3"]), "--seat", "first")
    child.expect(PROMPT)
    child.sendintr()
    child.expect(r"\r\nInterrupted; the game is left unfinished\.\r\n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert "Traceback" not in (child.before or "")


@pytest.mark.slow
def test_a_missing_file_a_non_model_or_another_games_model_is_refused_in_one_line(
    models: dict[str, Path], tmp_path: Path
) -> None:
    not_a_zip = tmp_path / "model.zip"
    not_a_zip.write_text("not a model")
    other_zip = tmp_path / "other.zip"
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("notes.txt", "a zip, but no model in it")
    cases = {
        str(tmp_path / "missing.zip"): "no such file",
        str(not_a_zip): re.escape("not a saved model (not a zip file)"),
        str(other_zip): "not a saved MaskablePPO or MaskableRecurrentPPO model",
        str(models["connect_four_v3"]): r"trained on observations \(6, 7, 2\) with 7 moves, but tictactoe_v3 has",
    }
    for path, problem in cases.items():
        run = subprocess.run(
            [sys.executable, "-m", "torchrl_mask", "play", "--env", "pettingzoo:tictactoe_v3", "-i", path],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert run.returncode == 2
        assert len(run.stderr.splitlines()) == 1 and re.search(problem, run.stderr), run.stderr
        assert "pass" in run.stderr and run.stdout == ""


@pytest.mark.slow
def test_a_reader_that_stops_reading_ends_play_quietly(models: dict[str, Path]) -> None:
    # `torchrl-mask play ... | head -n 1`: the reader goes away after one line, play's next writes find no reader
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    command = [
        sys.executable,
        "-m",
        "torchrl_mask",
        "play",
        "--env",
        "pettingzoo:tictactoe_v3",
        "-i",
        str(models["tictactoe_v3"]),
        "--seat",
        "second",
    ]
    play = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-n", "1"], stdin=play.stdout, capture_output=True, text=True, timeout=120)
    assert play.stdout is not None
    play.stdout.close()  # the pipe's read end is head's alone, as in a shell
    stderr = play.communicate(timeout=120)[1].decode()
    assert head.stdout.startswith("You play"), head.stdout
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert play.returncode in (0, 141), (play.returncode, stderr)  # done before head left, or told it had


@pytest.mark.slow
def test_ctrl_c_while_play_starts_up_is_one_line(models: dict[str, Path]) -> None:
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    command = [
        sys.executable,
        "-m",
        "torchrl_mask",
        "play",
        "--env",
        "pettingzoo:tictactoe_v3",
        "-i",
        str(models["tictactoe_v3"]),
    ]
    play = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)  # inside its imports (torch, the game), before the game begins
    play.send_signal(signal.SIGINT)
    play.wait(timeout=120)  # stdin stays open, as a terminal's does: the Ctrl-C, not the end of input, ends it
    assert play.stderr is not None and play.stdin is not None
    stderr = play.stderr.read().decode()
    play.stdin.close()
    assert play.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip().count("\n") == 0, stderr


@pytest.mark.slow
def test_the_model_searches_before_its_moves_with_simulations_and_the_game_plays_out(models: dict[str, Path]) -> None:
    # MCTS over the untrained network's priors and value: a whole Connect Four game, the model's moves all legal
    child = _spawn(
        "--env",
        "pettingzoo:connect_four_v3",
        "-i",
        str(models["connect_four_v3"]),
        "--seat",
        "first",
        "--simulations",
        "50",
    )
    assert re.fullmatch(RESULT, _play_out(child))


@pytest.mark.slow
def test_simulations_for_a_game_the_search_cannot_copy_are_refused_in_one_line(models: dict[str, Path]) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchrl_mask",
            "play",
            "--env",
            "pettingzoo:leduc_holdem_v4",
            "-i",
            str(models["leduc_holdem_v4"]),
            "--simulations",
            "10",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.splitlines()) == 1 and "--simulations 10: the search plays" in run.stderr, run.stderr
