#!/usr/bin/env bash
# The tests, in the Python that ./install.sh installed epi into: the active one, or the .venv it made on a system
# Python that forbids pip installs (PEP 668), where a bare `python3 -m pytest` would find neither pytest nor epi.
# Arguments go to pytest (./test.sh -x tests/test_cli.py).
set -euo pipefail
cd "$(dirname "$0")"
python="python3"
if [ -f .venv/.epi-installed ]; then
    python=".venv/bin/python"
fi
exec "$python" -m pytest "$@"
