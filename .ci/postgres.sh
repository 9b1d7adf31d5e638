#!/usr/bin/env bash
# A throwaway PostgreSQL server for the PostgresStore tests.
#
# Source it: it starts a fresh cluster (PostgreSQL 15 from the Debian packages, installed first
# if missing) in a temp dir, on a free 127.0.0.1 port, with password authentication, exports
# AGENTFLOW_PG_URL and stops the server (and removes the cluster) when the sourcing shell exits:
#
#   source .ci/postgres.sh && cargo test -p agentflow-store --features postgres
#
# Or run it with a command, which gets the server for its duration:
#
#   bash .ci/postgres.sh cargo test -p agentflow-store --features postgres
#
# initdb refuses to run as root, so as root the server runs as the `postgres` user (created by
# the package; an `agentflow-pg` system user is created if it is absent).

agentflow_pg_main() {
    local bin user port root pw
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        echo "== postgres: installing the postgresql package"
        if [ "$(id -u)" -ne 0 ]; then
            echo "postgres.sh: PostgreSQL is not installed and this is not root: apt-get install postgresql" >&2
            return 1
        fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null || return 1
        bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
        [ -x "$bin/initdb" ] || { echo "postgres.sh: initdb not found after installing postgresql" >&2; return 1; }
    fi

    # The user that runs the server (initdb and postgres refuse root).
    local run=()
    if [ "$(id -u)" -eq 0 ]; then
        user=postgres
        if ! id "$user" >/dev/null 2>&1; then
            user=agentflow-pg
            id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user" || return 1
        fi
        run=(runuser -u "$user" --)
    fi

    root=$(mktemp -d "${TMPDIR:-/tmp}/agentflow-pg.XXXXXX") || return 1
    chmod 755 "$root"
    pw=agentflow
    printf '%s\n' "$pw" >"$root/pwfile"
    [ "$(id -u)" -eq 0 ] && chown -R "$user" "$root"

    # A free port: one nothing answers on.
    port=""
    for _ in $(seq 1 50); do
        local p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            port=$p
            break
        fi
    done
    [ -n "$port" ] || { echo "postgres.sh: no free port found" >&2; return 1; }

    "${run[@]}" "$bin/initdb" -D "$root/data" -U agentflow --pwfile="$root/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$root/initdb.log" 2>&1 || {
        cat "$root/initdb.log" >&2
        return 1
    }
    "${run[@]}" "$bin/pg_ctl" -D "$root/data" -l "$root/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $root -c max_connections=300" start >/dev/null || {
        cat "$root/server.log" >&2
        return 1
    }
    AGENTFLOW_PG_ROOT=$root
    AGENTFLOW_PG_BIN=$bin
    AGENTFLOW_PG_RUN="${run[*]}"
    PGPASSWORD=$pw "$bin/createdb" -h 127.0.0.1 -p "$port" -U agentflow agentflow || return 1
    export AGENTFLOW_PG_URL="postgres://agentflow:$pw@127.0.0.1:$port/agentflow"
    echo "== postgres: PostgreSQL $("$bin/pg_ctl" --version | awk '{print $3}') on 127.0.0.1:$port, AGENTFLOW_PG_URL=$AGENTFLOW_PG_URL"
}

# Stops the server and removes its cluster; safe to call twice.
agentflow_pg_stop() {
    if [ -n "${AGENTFLOW_PG_ROOT:-}" ] && [ -d "$AGENTFLOW_PG_ROOT" ]; then
        # shellcheck disable=SC2086
        $AGENTFLOW_PG_RUN "$AGENTFLOW_PG_BIN/pg_ctl" -D "$AGENTFLOW_PG_ROOT/data" -m fast -w stop >/dev/null 2>&1 || true
        rm -rf "$AGENTFLOW_PG_ROOT"
        echo "== postgres: stopped"
    fi
    AGENTFLOW_PG_ROOT=""
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: leave the server running until the calling shell exits.
    agentflow_pg_main || { agentflow_pg_stop; return 1; }
    trap agentflow_pg_stop EXIT
else
    set -euo pipefail
    trap agentflow_pg_stop EXIT
    agentflow_pg_main
    if [ "$#" -gt 0 ]; then
        "$@"
    fi
fi
