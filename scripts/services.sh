# Shared by scripts/test.sh and scripts/bench.sh: make sure the local database and cache
# servers answer on their default ports, starting them when they are installed but stopped.
# Source it; it defines functions only.

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf '\033[31mtest.sh: %s\033[0m\n' "$*" >&2; exit 1; }

wait_for() { # description, command...
  local what=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "$what did not come up within 30 s"
}

ensure_postgres() {
  if pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then return; fi
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    say "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    wait_for "PostgreSQL on 127.0.0.1:5432" pg_isready -h 127.0.0.1 -p 5432
  else
    die "PostgreSQL is not answering on 127.0.0.1:5432 and is not installed here (need pg_ctlcluster). Install postgresql or point AGENTRY_TEST_POSTGRES_URL at a server."
  fi
}

# The API suite runs three tests at a time, and some start three replicas with a pool of 20
# PostgreSQL connections each: PostgreSQL's default of 100 connections was exhausted ("sorry,
# too many clients already"), and a test racing 48 requests got 503s from it. A local server
# gets room for 300 (a restart, once).
ensure_postgres_room() {
  local have
  have=$(psql -h 127.0.0.1 -U postgres -tAc "SHOW max_connections" 2>/dev/null || echo 0)
  if [ "${have:-0}" -ge 300 ]; then return; fi
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    say "PostgreSQL allows $have connections; raising it to 300 (restart)"
    psql -h 127.0.0.1 -U postgres -qc "ALTER SYSTEM SET max_connections = 300" >/dev/null
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main restart || true
    wait_for "PostgreSQL on 127.0.0.1:5432" pg_isready -h 127.0.0.1 -p 5432
  else
    say "PostgreSQL allows only $have connections and cannot be restarted from here: tests that run several replicas at once may be refused connections"
  fi
}

ensure_mysql() {
  if mysqladmin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then return; fi
  if [ -x /usr/sbin/mariadbd ]; then
    say "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    wait_for "MariaDB on 127.0.0.1:3306" mysqladmin -h 127.0.0.1 -uroot ping
  else
    die "MySQL/MariaDB is not answering on 127.0.0.1:3306 and mariadbd is not installed. Install mariadb-server or point AGENTRY_TEST_MYSQL_URL at a server."
  fi
}

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return; fi
  if command -v redis-server >/dev/null; then
    say "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
    wait_for "Redis on 127.0.0.1:6379" redis-cli -h 127.0.0.1 -p 6379 ping
  else
    die "Redis is not answering on 127.0.0.1:6379 and redis-server is not installed."
  fi
}

