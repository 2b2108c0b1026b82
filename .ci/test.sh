#!/usr/bin/env bash
# `make test`: the suite in two halves at once, each against a throwaway PostgreSQL of its own
# (.ci/with_postgres.sh): the end-to-end tests (marked e2e: real processes, several of which stop
# and restart their PostgreSQL) and the rest. They mostly wait on different things (processes and
# timers; Python and the database), so on two cores the suite takes about the longer half's time.
# The end-to-end half's output follows the other half's. With test arguments (PYTEST_ARGS), or a
# DATABASE_URL of your own (both halves would share its test database), one pytest runs them all.
set -uo pipefail
cd "$(dirname "$0")/.."
python=$1
shift
if [ $# -gt 0 ] || [ -n "${DATABASE_URL:-}" ]; then
  exec .ci/with_postgres.sh "$python" -m pytest "$@"
fi

e2e_log=$(mktemp "${TMPDIR:-/tmp}/e2e-tests.XXXXXX")
trap 'rm -f "$e2e_log"' EXIT
.ci/with_postgres.sh "$python" -m pytest -m e2e >"$e2e_log" 2>&1 &
e2e=$!
.ci/with_postgres.sh "$python" -m pytest -m "not e2e"
rest_status=$?
wait "$e2e"
e2e_status=$?
echo
echo "==== the end-to-end half (pytest -m e2e), run beside the rest ===="
cat "$e2e_log"
echo "==== exit codes: the rest $rest_status, the end-to-end half $e2e_status ===="
[ "$rest_status" = 0 ] && [ "$e2e_status" = 0 ]
