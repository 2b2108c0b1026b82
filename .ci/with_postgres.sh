#!/usr/bin/env bash
# Run a command against a throwaway PostgreSQL 15: initdb into a temporary folder, start it on a
# free loopback port, export DATABASE_URL, run the command, and tear everything down afterwards,
# whatever the command's outcome. An existing DATABASE_URL is used as it is. PG_DURABLE=1 keeps
# production durability (for benchmarks) and loads pg_stat_statements.
# The server's data folder and pg_ctl are exported (TEST_PG_DATA, TEST_PG_CTL) so that fault
# tests can restart PostgreSQL mid-run.
set -euo pipefail

if [ -n "${DATABASE_URL:-}" ]; then
  exec "$@"
fi

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
if [ ! -x "$PGBIN/initdb" ]; then
  echo "PostgreSQL 15 binaries not found in $PGBIN: installing the Debian package" >&2
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq postgresql-15 >/dev/null
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/jobtracking-pg.XXXXXX")
as_pg=()
if [ "$(id -u)" = 0 ]; then
  # initdb and postgres refuse to run as root.
  chown postgres: "$tmp"
  as_pg=(runuser -u postgres --)
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

cleanup() {
  "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

"${as_pg[@]}" "$PGBIN/initdb" -D "$tmp/data" -U postgres -A trust -E UTF8 --no-sync >/dev/null
if [ -n "${PG_DURABLE:-}" ]; then
  # Benchmarks of durability-sensitive paths: production settings (fsync and synchronous_commit
  # on, the defaults), plus pg_stat_statements to count statements per job.
  settings="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
else
  # Durability is pointless for a throwaway test database; speed is not.
  settings="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
fi
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -o \
  "-p $port -k $tmp -c listen_addresses=127.0.0.1 $settings -c max_connections=300" start >/dev/null
"${as_pg[@]}" "$PGBIN/createdb" -h 127.0.0.1 -p "$port" -U postgres jobtracking

export DATABASE_URL="postgres://postgres@127.0.0.1:$port/jobtracking"
export TEST_PG_DATA="$tmp/data"
export TEST_PG_CTL="${as_pg[*]} $PGBIN/pg_ctl"
echo "Throwaway PostgreSQL on 127.0.0.1:$port ($tmp)" >&2
"$@"
