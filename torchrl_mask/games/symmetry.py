"""A board game's symmetries, for self-play to learn from each move's images as well as from the move itself.

Connect Four looks the same in a mirror: reflected left to right, a position's legal moves, threats and result
are the reflected position's, and a move in column ``c`` is a move in column ``6 - c``. Tic-tac-toe has eight such
symmetries (the square's rotations and reflections). A game played is then also a game played in each image, with
the same rewards, so each learner move can train the policy as several; AlphaGo and AlphaZero train on the eight
images of each Go position so.

A :class:`Symmetry` maps a seat's view, channels-last planes ``(..., H, W, C)`` (PettingZoo's boards), and the
action indices with it. :func:`board_symmetries` builds a board's group (Connect Four's mirror, a square board's
eight) and :func:`game_symmetries` gives each game's, as its record names them. :func:`image_moves` images the
learner's moves, which :class:`~torchrl_mask.games.selfplay.SelfPlayRollout` adds to the rollout beside the moves
played;
:func:`random_images` puts each move in one of its images instead, drawn at random (the move itself among them),
as KataGo draws one symmetry for each training position: the rollout keeps its size, and the images are met
across rollouts rather than all at once.

Example:
    >>> import torch
    >>> (mirror,) = game_symmetries("connect_four_v3")
    >>> mirror.name, mirror.actions(torch.tensor([0, 3, 6])).tolist()
    ('mirror', [6, 3, 0])
    >>> [symmetry.name for symmetry in game_symmetries("tictactoe_v3")]
    ['rotate_90', 'rotate_180', 'rotate_270', 'mirror', 'flip', 'transpose', 'anti_transpose']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial

import torch
from tensordict import TensorDictBase

from torchrl_mask.games.profile import game_profile
from torchrl_mask.rollout import storage as st

__all__ = ["Symmetry", "board_symmetries", "game_symmetries", "image_moves", "random_images"]

Planes = Callable[[torch.Tensor], torch.Tensor]


def _anti_transpose(planes: torch.Tensor) -> torch.Tensor:
    """The reflection across the anti-diagonal: the half turn, then the transpose."""
    return torch.rot90(planes, 2, (-3, -2)).transpose(-3, -2)


# A square's rotations and reflections on the (H, W) dims of (..., H, W, C) planes, the identity left out: torch's
# own functions bound to those dims, no lambdas, so that a SelfPlayPolicy holding them pickles into a collector's
# worker processes.
_SQUARE: dict[str, Planes] = {
    "rotate_90": partial(torch.rot90, k=1, dims=(-3, -2)),
    "rotate_180": partial(torch.rot90, k=2, dims=(-3, -2)),
    "rotate_270": partial(torch.rot90, k=3, dims=(-3, -2)),
    "mirror": partial(torch.flip, dims=(-2,)),
    "flip": partial(torch.flip, dims=(-3,)),
    "transpose": partial(torch.transpose, dim0=-3, dim1=-2),
    "anti_transpose": _anti_transpose,
}


@dataclass(frozen=True)
class Symmetry:
    """One symmetry of a board game: how a seat's view and the actions change together.

    :param name: what it does (``"mirror"``: left to right).
    :param planes: the view's image, ``(..., H, W, C)`` to ``(..., H, W, C)``, channels last.
    :param source: int64 ``(n_actions,)``: the imaged position's action ``i`` is the played position's action
        ``source[i]`` (a permutation).
    """

    name: str
    planes: Planes
    source: torch.Tensor

    def actions(self, actions: torch.Tensor) -> torch.Tensor:
        """The images of actions.

        :param actions: int ``(*B,)`` in the played position.
        :return: int64 ``(*B,)``, the same moves in the imaged position.
        """
        inverse = torch.empty_like(self.source)
        inverse[self.source] = torch.arange(len(self.source))
        return inverse[actions.long()]

    def mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The image of a legal-move mask.

        :param mask: bool ``(*B, n_actions)``.
        :return: bool ``(*B, n_actions)``.
        """
        return mask[..., self.source]


def board_symmetries(height: int, width: int, actions: str) -> tuple[Symmetry, ...]:
    """A board's symmetries other than the identity, for games whose actions are its cells or its columns.

    :param height: the board's rows ``H``.
    :param width: the board's columns ``W``.
    :param actions: ``"cells"`` (action ``r * W + c`` plays cell ``(r, c)``, as tic-tac-toe's do) gives a square
        board's seven (only the two reflections and the half turn where ``H != W``); ``"columns"`` (action ``c``
        drops into column ``c``, as Connect Four's do) gives the mirror, the only one a falling piece keeps.
    :return: the symmetries, the identity left out.
    :raises ValueError: ``actions`` neither ``"cells"`` nor ``"columns"``.
    """
    if actions not in ("cells", "columns"):
        raise ValueError(f"board_symmetries(actions={actions!r}): use 'cells' or 'columns'.")
    names = ["rotate_180", "mirror", "flip"] if height != width else list(_SQUARE)
    names = ["mirror"] if actions == "columns" else names
    # each cell holds its own index; a symmetry's image of the grid says which cell each cell came from
    cells = torch.arange(height * width).reshape(height, width, 1)
    symmetries = []
    for name in names:
        came_from = _SQUARE[name](cells)[..., 0]
        source = came_from.reshape(-1) if actions == "cells" else came_from[0]
        symmetries.append(Symmetry(name, _SQUARE[name], source.clone()))
    return tuple(symmetries)


@cache
def game_symmetries(game: str) -> tuple[Symmetry, ...]:
    """A game's symmetries, as its record names them (``symmetries:`` in
    :mod:`torchrl_mask.games.profile`'s ``profiles.yml``); none for a game without any.

    :param game: a PettingZoo classic game (``"connect_four_v3"``).
    :return: the symmetries, possibly none.
    """
    board = game_profile(game).symmetries
    return () if board is None else board_symmetries(*board)


#: The entries of a move that its image changes (:func:`image_moves`); the rest are the played move's.
_IMAGED = (st.OBSERVATION, ("next", st.OBSERVATION), st.ACTION_MASK, st.ACTION)


def image_moves(moves: TensorDictBase, symmetry: Symmetry) -> TensorDictBase:
    """Moves' images: each view, mask and action imaged, the rest (log-probability, value, reward, next value,
    done) the played move's.

    An imaged move thus has the played move's rewards, values and dones, and so its advantage and return (where
    the rollout's rows cut both trajectories alike). It is taken as drawn with the played move's probability,
    which is exact for a policy that treats the images alike, and PPO's clipped ratio pulls the policy that way.
    Its own log-probability under the playing policy would not do: early on, a policy may give the image of its
    move almost no probability, and the ratio's unclipped side (a move worse than expected) then grows without
    bound, and the network's weights can turn NaN (measured for Connect Four in docs/experiments.md, "Each move and
    its mirror image").

    :param moves: ``(*B,)`` moves with ``"observation"`` ``(*B, H, W, C)``, ``"action_mask"`` ``(*B, n_actions)``
        and ``"action"`` ``(*B,)`` (and ``("next", "observation")``, imaged too where present).
    :param symmetry: the symmetry.
    :return: new ``(*B,)`` moves; the entries other than those four are ``moves``' own tensors.
    """
    image = moves.copy()
    for key in (st.OBSERVATION, ("next", st.OBSERVATION)):
        if key in moves.keys(include_nested=True):
            image.set(key, symmetry.planes(moves.get(key)))
    image.set(st.ACTION_MASK, symmetry.mask(moves.get(st.ACTION_MASK)))
    image.set(st.ACTION, symmetry.actions(moves.get(st.ACTION)).to(moves.get(st.ACTION).dtype))
    return image


def random_images(moves: TensorDictBase, symmetries: Sequence[Symmetry]) -> TensorDictBase:
    """Each move as one of its images, drawn uniformly from the identity and ``symmetries`` (torch's default
    generator, so a seeded run draws alike), each imaged as :func:`image_moves` images it: its view, mask and
    action imaged, its log-probability, value, reward and done the played move's.

    :param moves: ``(N,)`` moves, as :func:`image_moves` takes them.
    :param symmetries: the game's symmetries, the identity left out (:func:`game_symmetries`).
    :return: new ``(N,)`` moves, in the same order: each the move played or one of its images.
    """
    drawn = torch.randint(len(symmetries) + 1, moves.batch_size)  # 0: the move as played
    imaged = moves.copy()
    keys = [key for key in _IMAGED if key in moves.keys(include_nested=True)]
    for key in keys:
        imaged.set(key, moves.get(key).clone())
    changed = moves.select(*keys)  # only the entries an image changes
    for index, symmetry in enumerate(symmetries, start=1):
        chosen = drawn == index
        image = image_moves(changed[chosen], symmetry)
        for key in keys:
            imaged.get(key)[chosen] = image.get(key)
    return imaged
