# Sourced by scripts/sb3_contrib_tests.sh and scripts/sb3_contrib_recurrent_tests.sh: unpacks the tests of the
# sb3-contrib release installed here (its PyPI sdist) into a temporary folder removed on exit, and sets
#   PY     the venv's python, as an absolute path (from $PY, default .venv/bin/python);
#   tests  the sdist's tests folder, where the caller writes the conftest that swaps in torchrl_mask's class.
PY="${PY:-.venv/bin/python}"
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
version="$("$PY" -c 'import sb3_contrib; print(sb3_contrib.__version__)')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download --quiet --no-deps --no-binary :all: --dest "$work" "sb3-contrib==$version"
tar -xzf "$work"/sb3_contrib-"$version".tar.gz -C "$work"
tests="$work/sb3_contrib-$version/tests"
