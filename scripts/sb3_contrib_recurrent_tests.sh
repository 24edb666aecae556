#!/usr/bin/env bash
# Run sb3-contrib's own RecurrentPPO tests (tests/test_lstm.py) with torchrl_mask.MaskableRecurrentPPO in its place.
#
# Takes the tests from the sdist of the sb3-contrib release installed here (PyPI), as scripts/sb3_contrib_tests.sh
# does for MaskablePPO, and swaps `sb3_contrib.RecurrentPPO` for ours by a conftest written beside them. Their envs
# have no action masks, so the swapped-in class is ours with one difference: learn() defaults to use_masking=False
# (ours defaults to True and refuses an env without masks). Nothing of sb3-contrib is kept in this repository: the
# files live in a temporary folder, removed on exit.
#   usage: scripts/sb3_contrib_recurrent_tests.sh [pytest arguments]   (from the repository root, with .venv set up)
#   e.g.   scripts/sb3_contrib_recurrent_tests.sh -m "not slow"        (leaves out the 50,000-step performance test)
set -euo pipefail
# shellcheck source=scripts/sb3_contrib_sdist.sh
source "$(dirname "$0")/sb3_contrib_sdist.sh"  # sets PY and tests (the unpacked sdist's tests folder)
cat > "$tests/conftest.py" <<'PY'
import sb3_contrib
import sb3_contrib.ppo_recurrent

import torchrl_mask


class MaskableRecurrentPPO(torchrl_mask.MaskableRecurrentPPO):
    """torchrl_mask's class; learn() defaults to use_masking=False, as these tests' envs have no masks."""

    def learn(self, *args, use_masking=False, **kwargs):
        return super().learn(*args, use_masking=use_masking, **kwargs)


# Every `from sb3_contrib import RecurrentPPO` in these tests now gets torchrl_mask's class.
sb3_contrib.RecurrentPPO = MaskableRecurrentPPO
sb3_contrib.ppo_recurrent.RecurrentPPO = MaskableRecurrentPPO


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: sb3-contrib's long-running tests")


def pytest_collection_finish(session):
    from test_lstm import RecurrentPPO

    assert RecurrentPPO is MaskableRecurrentPPO, "the swap did not take"
PY
cd "$tests"
# Run from the tests folder, so that the installed sb3_contrib (not the sdist's copy) is the one imported.
"$PY" -m pytest -p no:cacheprovider -q test_lstm.py "$@"
