"""The ``torchrl-mask`` command: its options, the run they ask for, one pipeline for every run, and its files.

- ``cli``: the command line only (``train``, ``tune``, ``play``); ``train_args``, ``tune_args``, ``arg_types``: their
  options;
- ``kinds``: what an ``--env`` names (a gymnasium env, or a ``pettingzoo:<game>``), the one place that reads its prefix;
- ``config``: :class:`TrainConfig`, and the run a user's options ask for, the env's defaults filled in (a game's from
  its record, :mod:`torchrl_mask.games.profile`); ``hyperparams``, ``conf_file``: what each value may be, rl-zoo3's
  YAML files; ``UsageError`` says the fix;
- ``prepare``: every check of a run, once, before anything is written; ``pipeline``: the run (claim the folder,
  build, learn, save however it ends, evaluate, write), with a task per kind of env: ``gym_task``, ``game_task``
  (its collector: ``game_collector``); ``models``: the model either task builds; ``run``: the command's run, its
  report and exit status;
- ``run_folder``: the ``--out`` folder and its lock; ``files``: every file written whole or not at all;
- ``masked_env``, ``train_collectors``, ``trained_agent``, ``results``: a gymnasium run's env, collectors, ``-i``
  checks, evaluation and plot; ``selfplay_files``: a self-play run's;
- ``tune``, ``search_spaces``, ``tune_outputs``: ``torchrl-mask tune``, each trial a task of the same pipeline;
- ``play``: a person plays a trained self-play model in the terminal.

May import anything in the library except the benchmark (:mod:`torchrl_mask.bench`), which imports this package:
``python -m torchrl_mask`` (:mod:`torchrl_mask.__main__`) hands ``bench`` to it.
"""
