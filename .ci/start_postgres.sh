#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1 for the distributed-worker tests and print the
# URL to use. Needs Debian's postgresql package (installed by .ci/run when missing).
set -euo pipefail
PORT="${1:-55432}"
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
DATA="${MEDPANEL_PG_DATA:-$(mktemp -d /tmp/medpanel-pg.XXXXXX)}"  # the caller may name it, to stop it later
chown postgres "$DATA"
runuser -u postgres -- "$BIN/initdb" -D "$DATA" -A trust -U postgres >/dev/null
runuser -u postgres -- "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA -c max_connections=200" start >/dev/null
echo "postgresql://postgres@127.0.0.1:$PORT/postgres"
