#!/usr/bin/env bash
# Run sb3-contrib's own MaskablePPO tests with torchrl_mask.MaskablePPO in its place.
#
# Takes the tests from the sdist of the sb3-contrib release installed here (PyPI), and runs the test files that use
# MaskablePPO with `sb3_contrib.MaskablePPO` swapped for ours by a conftest written beside them. Nothing of
# sb3-contrib is kept in this repository: the files live in a temporary folder, removed on exit.
#   usage: scripts/sb3_contrib_tests.sh [pytest arguments]     (from the repository root, with .venv set up)
set -euo pipefail
# shellcheck source=scripts/sb3_contrib_sdist.sh
source "$(dirname "$0")/sb3_contrib_sdist.sh"  # sets PY and tests (the unpacked sdist's tests folder)
cat > "$tests/conftest.py" <<'PY'
import sb3_contrib
import sb3_contrib.ppo_mask

import torchrl_mask

# Every `from sb3_contrib import MaskablePPO` in these tests now gets torchrl_mask's class.
sb3_contrib.MaskablePPO = torchrl_mask.MaskablePPO
sb3_contrib.ppo_mask.MaskablePPO = torchrl_mask.MaskablePPO


def pytest_collection_finish(session):
    from test_invalid_actions import MaskablePPO

    assert MaskablePPO is torchrl_mask.MaskablePPO, "the swap did not take"
PY
cd "$tests"
# Run from the tests folder, so that the installed sb3_contrib (not the sdist's copy) is the one imported.
"$PY" -m pytest -p no:cacheprovider -q test_invalid_actions.py test_cnn.py test_run.py test_train_eval_mode.py \
    -k "MaskablePPO or maskable or mask or invalid or Mask" "$@"
