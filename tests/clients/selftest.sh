#!/usr/bin/env bash
# Self-test of the outside-client harnesses in tests/clients/.
# Installs the clients first if needed (.ci/setup-clients.sh is idempotent and
# takes ~0.1 s when everything is already in ${CUTR_CACHE:-<repo>/.cache}/clients).
# Ends with 'N passed, N failed'; exit status 1 on any failure.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$REPO/.ci/setup-clients.sh" >/dev/null
CACHE="${CUTR_CACHE:-$REPO/.cache}"
CACHE="$(cd "$CACHE" && pwd)"
export CUTR_CACHE="$CACHE"
exec "$CACHE/clients/venv/bin/python" "$REPO/tests/clients/selftest.py" "$@"
