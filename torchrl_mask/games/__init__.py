"""Turn-based games as one concern: PettingZoo's AEC games trained by self-play and judged against fixed players.

- ``env``: ``TurnBasedEnv``, a PettingZoo AEC game as a TorchRL env (one move per step, the mover's view and mask);
- ``boards``: ``BoardGames``, Connect Four and tic-tac-toe on numpy boards, a move in many games at once (PettingZoo's
  rules; what ``TurnBasedEnv`` steps them with);
- ``selfplay``: ``SelfPlayPolicy`` (one shared policy for every seat, or the learner against past snapshots) and
  the reader that splits a collector's batch of alternating moves into each seat's trajectory
  (``SelfPlayPolicy.rollout_reader``, which ``MaskablePPO.learn(collector=...)`` uses);
- ``league``: ``League``, the learner's opponents (snapshots and fixed players) drawn by what it does not beat yet;
- ``collector``: ``selfplay_collector``, the TorchRL collector of many games played by a self-play policy (in
  this process or in worker processes);
- ``seat_split``: the rules of that split (each seat's moves, its rewards up to its next move, the game's end);
- ``recurrent_selfplay``: ``RecurrentSelfPlayPolicy``, the same for ``MaskableRecurrentPPO``, each seat with its own
  LSTM state;
- ``symmetry``: a board game's symmetries (Connect Four's mirror, tic-tac-toe's eight) and the images of the
  learner's moves that self-play also trains on;
- ``network``: ``BoardCNN``, a convolutional features extractor for channels-last boards (any MaskablePPO);
- ``players``: fixed players, functions ``(observation, mask, rng) -> action`` (rlcard's Leduc rule agent too);
- ``search``: players that search the game tree (perfect tic-tac-toe, Connect Four's ``negamax(depth)``);
- ``solver``: the perfect Connect Four player, where the optional ``bitbully`` solver is installed;
- ``mcts``: a trained model that searches when it plays (PUCT over its priors and values), Connect Four and
  tic-tac-toe;
- ``seat_env``: ``SeatEnv``, one seat of a game as a gymnasium env against a fixed player;
- ``ladder``: which opponents and which metric each game's evaluation has;
- ``arena``: one loop over PettingZoo's AEC API for any players, many games side by side;
- ``evaluation``: a trained model as a player, against its game's ladder (during and after training);
- ``pons_sets``, ``perfect_play``: Pascal Pons' Connect Four test positions with every move's exact value (shipped
  data, never trained on), and a player's mistake rates on them;
- ``exploitability``: a Leduc hold'em policy's exploitability in OpenSpiel's ``leduc_poker``;
- ``text``: a seat's view as text and its moves by name (what ``torchrl-mask play`` shows and reads).

May import: :mod:`torchrl_mask.rollout`, :mod:`torchrl_mask.distributions`, :mod:`torchrl_mask.torchrl`,
:mod:`torchrl_mask.algorithms`; never :mod:`torchrl_mask.app` or :mod:`torchrl_mask.bench`. The algorithms never
import this package.
"""
