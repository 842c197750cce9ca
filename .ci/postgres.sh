# Sourced by .ci/run (bash): a throwaway PostgreSQL 15 cluster on loopback (and
# Debian's PgBouncer, which the tests start themselves) for the PostgreSQL cases
# of the suite (tests/postgres/server.py reads AGENTQ_TEST_POSTGRES_URL; with CI
# set, its absence fails them). Run as root: the cluster belongs to the postgres
# user, and the tests connect as a role without
# superuser (CREATEDB for a database per test, CREATEROLE for the permission
# tests, pg_signal_backend so DROP DATABASE ... WITH (FORCE) ends its sessions).
# fsync is off: these are correctness tests; the benchmarks start their own.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=${AGENTQ_CI_PGPORT:-54329}
if [ ! -x "$PGBIN/initdb" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
fi
# PgBouncer, for the transaction-pooling cases (tests/postgres/pgbouncer.py starts
# one per test process in front of this cluster; with CI set they fail without it).
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
fi
PGDIR=$(mktemp -d /tmp/agentq-pg.XXXXXX)
chown postgres "$PGDIR"
runuser -u postgres -- "$PGBIN/initdb" -D "$PGDIR/data" -A trust -U postgres >/dev/null
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDIR/data" -w -l "$PGDIR/log" \
    -o "-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c full_page_writes=off" \
    start >/dev/null
runuser -u postgres -- "$PGBIN/psql" -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE agentq_ci LOGIN CREATEDB CREATEROLE" -c "GRANT pg_signal_backend TO agentq_ci"
export AGENTQ_TEST_POSTGRES_URL="postgresql://agentq_ci@127.0.0.1:$PGPORT/postgres"
stop_postgres() {
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null || true
    rm -rf "$PGDIR"
}
