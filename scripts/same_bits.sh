#!/usr/bin/env bash
# One seed, two revisions of the code: does each give the same policy.pth (inside model.zip) and evaluation.json,
# byte for byte? Trains a gymnasium run, a tic-tac-toe run and a short Connect Four run at REV (a git worktree) and
# at the working tree, with the same .venv and the same options, and compares the files.
#
# Usage, from the repository root once `make setup` has made .venv:  scripts/same_bits.sh REV
# Prints one line per run and file; exits 1 if any differs.
set -euo pipefail
rev=${1:?usage: scripts/same_bits.sh REV (a commit, tag or branch to compare the working tree with)}
root=$(git rev-parse --show-toplevel)
python="$root/.venv/bin/python"
work=$(mktemp -d)
git worktree add -q --detach "$work/code-old" "$rev"
trap 'git -C "$root" worktree remove --force "$work/code-old"; rm -rf "$work"' EXIT

runs=(
  "taxi|--env Taxi-v4 -n 8192 --hyperparams n_envs=2 n_steps=256 --eval-freq 4096 --eval-episodes 5"
  "tictactoe|--env pettingzoo:tictactoe_v3 -n 16384 --eval-episodes 20"
  "connect_four|--env pettingzoo:connect_four_v3 -n 8192 --eval-episodes 10"
)
status=0
for run in "${runs[@]}"; do
  name=${run%%|*}
  read -r -a options <<< "${run#*|}"
  for side in old new; do
    code="$work/code-old"; [[ $side == new ]] && code="$root"
    mkdir -p "$work/$side"
    (cd "$work/$side" && PYTHONPATH="$code" "$python" -m torchrl_mask train "${options[@]}" --seed 3 \
      --out "run-$name" --no-progress --verbose 0 > "run-$name.log" 2>&1) \
      || { echo "$name ($side): the run failed:"; tail -5 "$work/$side/run-$name.log"; exit 1; }
  done
  old="$work/old/run-$name" new="$work/new/run-$name"
  if cmp -s <(unzip -p "$old/model.zip" policy.pth) <(unzip -p "$new/model.zip" policy.pth); then
    echo "$name: policy.pth identical"
  else
    echo "$name: policy.pth DIFFERS"; status=1
  fi
  if cmp -s "$old/evaluation.json" "$new/evaluation.json"; then
    echo "$name: evaluation.json identical"
  else
    echo "$name: evaluation.json DIFFERS"; diff "$old/evaluation.json" "$new/evaluation.json" | head -20 || true; status=1
  fi
done
exit $status
