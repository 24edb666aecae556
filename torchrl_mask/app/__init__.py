"""The ``torchrl-mask`` command: arguments, configuration, training runs and their results.

- ``cli``: the arguments only (``train``, ``play``, ``bench``; ``game_args``: ``train``'s self-play league options);
  ``config``, ``hyperparams``: what a run is made of, checked, with ``UsageError`` saying the fix; ``run_folder``:
  the ``--out`` folder and its lock;
- ``masked_env``: the env a gymnasium id becomes; ``trained_agent``: the checks of ``-i model.zip``; ``training``: one
  run; ``results``: evaluation and what is written;
- ``selfplay_training``: one self-play run on a ``pettingzoo:<game>``, its win rates and what is written;
- ``play``: a person plays a trained self-play model in the terminal.

May import anything in the library; the benchmark harness (:mod:`torchrl_mask.bench`) only inside ``cli``'s
``bench`` command.
"""
