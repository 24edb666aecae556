"""Label every legal move of Pascal Pons' six Connect Four test sets with its exact value, once, by a solver.

    .venv/bin/pip install 'torchrl-mask[solver]'   # bitbully (AGPL): a development tool, never a dependency
    .venv/bin/python scripts/label_pons_sets.py BENCHMARK_DIR [--out torchrl_mask/games/data/pons_connect_four.npz]

BENCHMARK_DIR holds the six files ``Test_L<stage>_R<difficulty>`` (AlphaZero.jl's
``games/connect-four/benchmark/``, MIT; the same files as on Pons' site): 1,000 lines each, ``<moves> <score>``,
the moves as columns 1-7 from the first one played and the score the position's exact value for the player to move
(Pons' scale: ``22 - stones`` the mover will have played when it wins, negative for a loss, 0 a draw).

For each position the solver (``bitbully.BitBully().score_all_moves``, its 12-ply opening book and a full search
beyond) scores every legal column on the same scale; the best column's score must equal the set's own published
score, or the script stops and writes nothing. The output is what :mod:`torchrl_mask.games.pons_sets` loads:

- ``set_names`` (str ``(6,)``), ``set`` (int8 ``(6000,)``): each position's set, in the files' order;
- ``sequence`` (str ``(6000,)``): the moves as in the files (columns 1-7);
- ``score`` (int8 ``(6000,)``): the published score;
- ``move_scores`` (int8 ``(6000, 7)``): each column's exact score for the mover, ``-128`` for a full column.

About five minutes on one core (the beginning-medium positions take the longest).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

# file -> set name, in the order the field reports them (by difficulty, then stage), as AlphaZero.jl does
SETS = {
    "Test_L1_R1": "beginning_easy",
    "Test_L2_R1": "middle_easy",
    "Test_L3_R1": "end_easy",
    "Test_L1_R2": "beginning_medium",
    "Test_L2_R2": "middle_medium",
    "Test_L1_R3": "beginning_hard",
}
FULL_COLUMN = -128


def read_set(path: Path) -> list[tuple[str, int]]:
    """A set file's lines as ``(moves, score)``.

    :param path: a ``Test_L*_R*`` file.
    :return: its positions, in order.
    """
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(moves, int(score)) for moves, score in lines]


def label(moves: str, agent: object) -> np.ndarray:
    """Every column's exact score for the player to move, :data:`FULL_COLUMN` where the column is full.

    :param moves: the moves, columns 1-7.
    :param agent: a ``bitbully.BitBully``.
    :return: int8 ``(7,)``.
    """
    import bitbully

    scores = agent.score_all_moves(bitbully.Board([int(column) - 1 for column in moves]))  # type: ignore[attr-defined]
    row = np.full(7, FULL_COLUMN, dtype=np.int8)
    for column, score in scores.items():
        row[column] = score
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark_dir", type=Path, help="the folder of the six Test_L*_R* files")
    parser.add_argument("--out", type=Path, default=Path("torchrl_mask/games/data/pons_connect_four.npz"))
    args = parser.parse_args(argv)
    try:
        import bitbully
    except ImportError:
        print("scripts/label_pons_sets.py needs the solver: pip install 'torchrl-mask[solver]'", file=sys.stderr)
        return 1
    agent = bitbully.BitBully()
    sets, sequences, published, move_scores = [], [], [], []
    for index, (file, name) in enumerate(SETS.items()):
        began = time.perf_counter()
        for moves, score in read_set(args.benchmark_dir / file):
            row = label(moves, agent)
            if row.max() != score:
                print(
                    f"{file}: {moves}: the solver's best move scores {row.max()}, the set says {score}", file=sys.stderr
                )
                return 1
            sets.append(index), sequences.append(moves), published.append(score), move_scores.append(row)
        print(f"{name}: {sets.count(index)} positions, every best move agrees ({time.perf_counter() - began:.0f} s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        set_names=np.array(list(SETS.values())),
        set=np.array(sets, dtype=np.int8),
        sequence=np.array(sequences),
        score=np.array(published, dtype=np.int8),
        move_scores=np.stack(move_scores),
    )
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
