//! The shell scripts the add-on steps run (`step.rs`), and the reading of what they print
//! (pure). PostgreSQL's dump counts every table's rows in the very snapshot `pg_dump` reads
//! (`pg_export_snapshot`, the transaction held open while `pg_dump --snapshot` runs), so a
//! throw-away restore can be compared with what the source held at that moment. Redis's RDB
//! is checked by two readers: `redis-check-rdb` counting its keys, and a throw-away server
//! loading it.

use std::collections::BTreeMap;

use super::engine;

/// A query whose `\gexec` counts every user table's rows, one JSON object per line.
const COUNT_TABLES: &str = "SELECT format('SELECT json_build_object(%L, count(*)) FROM %I.%I', \
     n.nspname || '.' || c.relname, n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n \
     ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN \
     ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1 \\gexec";

/// `pg_dump -Fc` of `app` into `{dir}/{file}`, the row counts of the same snapshot on stdout.
/// `PGPASSWORD` is in the environment.
pub fn postgres_dump(dir: &str, file: &str, host: &str, port: u16) -> String {
    let connect = format!("-h {host} -p {port} -U slipway -d app");
    format!(
        "set -e\ncd {dir}\nrm -f {file}.partial\n\
         psql -X -q -v ON_ERROR_STOP=1 {connect} -tA <<'SQL'\n\
         BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n\
         SELECT pg_export_snapshot() AS snapshot \\gset\n\
         \\setenv SLIPWAY_SNAPSHOT :snapshot\n\
         \\! pg_dump {connect} -Fc --snapshot=\"$SLIPWAY_SNAPSHOT\" -f {file}.partial\n\
         {COUNT_TABLES}\n\
         COMMIT;\n\
         SQL\n\
         test -s {file}.partial || {{ echo 'pg_dump wrote nothing' >&2; exit 1; }}\n\
         mv {file}.partial {file}\n"
    )
}

/// A throw-away PostgreSQL in `{dir}/.verify-{name}`, `{file}` restored into its `app`
/// database, its row counts on stdout; removed however it ends.
pub fn postgres_verify(dir: &str, file: &str, name: &str, memory_mb: u64, custom: bool) -> String {
    let settings: Vec<String> = engine::postgres_settings(memory_mb)
        .into_iter()
        .map(|(name, value)| format!("-c {name}={value}"))
        .collect();
    let load = match custom {
        true => format!(
            "pg_restore -h \"$V\" -U slipway -d app --exit-on-error --no-owner --no-acl {dir}/{file}"
        ),
        false => format!(
            "psql -X -q -v ON_ERROR_STOP=1 -h \"$V\" -U slipway -d app -f {dir}/{file} >/dev/null"
        ),
    };
    format!(
        "set -e\nV={dir}/.verify-{name}\nrm -rf \"$V\"\nmkdir -p \"$V\"\n\
         trap 'pg_ctl -D \"$V/pg\" -m immediate stop >/dev/null 2>&1 || true; rm -rf \"$V\"' EXIT\n\
         initdb -D \"$V/pg\" -U slipway --auth=trust -E UTF8 --no-locale >/dev/null\n\
         pg_ctl -D \"$V/pg\" -w -t 120 -l \"$V/log\" -o \"-c listen_addresses='' \
         -c unix_socket_directories=$V -c fsync=off -c full_page_writes=off {}\" start >/dev/null \
         || {{ cat \"$V/log\" >&2; exit 1; }}\n\
         createdb -h \"$V\" -U slipway app\n\
         {load}\n\
         psql -X -q -v ON_ERROR_STOP=1 -h \"$V\" -U slipway -d app -tA <<'SQL'\n\
         {COUNT_TABLES}\n\
         SQL\n",
        settings.join(" ")
    )
}

/// `pg_basebackup` of the whole cluster (tar format, compressed, its WAL streamed alongside,
/// a fast checkpoint) packed into one tar `{dir}/{file}` (`base.tar.gz`, `pg_wal.tar.gz`,
/// `backup_manifest`); the first WAL segment its recovery needs on stdout.
/// `PGPASSWORD` is in the environment.
pub fn postgres_base_backup(dir: &str, file: &str, host: &str, port: u16) -> String {
    format!(
        "set -e\ncd {dir}\nrm -rf {file}.d {file}.partial\nmkdir {file}.d\n\
         trap 'rm -rf {file}.d' EXIT\n\
         pg_basebackup -h {host} -p {port} -U slipway -w -D {file}.d -Ft -z -X stream \
         --checkpoint=fast >&2\n\
         tar -xzOf {file}.d/base.tar.gz backup_label \
         | sed -n 's/^START WAL LOCATION: .*(file \\([0-9A-F]*\\))$/\\1/p'\n\
         tar -cf {file}.partial -C {file}.d base.tar.gz pg_wal.tar.gz backup_manifest\n\
         mv {file}.partial {file}\n"
    )
}

/// Unpacks a base backup (`{tar}`, made by `postgres_base_backup`) into the data directory
/// `{pgdata}` (made empty, mode 0700), its streamed WAL into `pg_wal`; the manifest is left
/// at `{pgdata}.manifest`.
fn unpack_base(tar: &str, pgdata: &str) -> String {
    format!(
        "rm -rf {pgdata} {pgdata}.b\nmkdir -m 700 {pgdata}\nmkdir {pgdata}.b\n\
         tar -xf {tar} -C {pgdata}.b\n\
         tar -xzf {pgdata}.b/base.tar.gz -C {pgdata}\n\
         tar -xzf {pgdata}.b/pg_wal.tar.gz -C {pgdata}/pg_wal\n\
         mv {pgdata}.b/backup_manifest {pgdata}.manifest\nrm -rf {pgdata}.b\n"
    )
}

/// Proves a base backup: unpacked in `{dir}/.verify-{name}`, `pg_verifybackup` against its
/// manifest (every file's checksum, the WAL it needs parsed), then a throw-away server
/// started on it (it recovers to the backup's end) whose row counts are printed; removed
/// however it ends.
pub fn postgres_verify_base(dir: &str, file: &str, name: &str, memory_mb: u64) -> String {
    let settings: Vec<String> = engine::postgres_settings(memory_mb)
        .into_iter()
        .map(|(name, value)| format!("-c {name}={value}"))
        .collect();
    format!(
        "set -e\nV={dir}/.verify-{name}\nrm -rf \"$V\"\nmkdir -p \"$V\"\n\
         trap 'pg_ctl -D \"$V/pg\" -m immediate stop >/dev/null 2>&1 || true; rm -rf \"$V\"' EXIT\n\
         {unpack}\
         pg_verifybackup -q -m \"$V/pg.manifest\" \"$V/pg\" >&2\n\
         pg_ctl -D \"$V/pg\" -w -t 600 -l \"$V/log\" -o \"-c listen_addresses='' \
         -c unix_socket_directories=$V -c archive_mode=off -c fsync=off {}\" start >/dev/null \
         || {{ cat \"$V/log\" >&2; exit 1; }}\n\
         psql -X -q -v ON_ERROR_STOP=1 -h \"$V\" -U slipway -d app -tA <<'SQL'\n\
         {COUNT_TABLES}\n\
         SQL\n",
        settings.join(" "),
        unpack = unpack_base(&format!("{dir}/{file}"), "\"$V/pg\""),
    )
}

/// Point-in-time recovery into the add-on whose volume is `{data}` (its server stopped):
/// the base backup and the WAL after it were put in `{data}/restore` (`base.tar`, `wal/`);
/// a server with no address recovers to `{target}` and promotes, is stopped, and the data
/// directory is the add-on's. Its row counts on stdout.
pub fn postgres_recover(data: &str, target: &str, memory_mb: u64) -> String {
    let settings: Vec<String> = engine::postgres_settings(memory_mb)
        .into_iter()
        .map(|(name, value)| format!("-c {name}={value}"))
        .collect();
    let r = format!("{data}/restore");
    let pg = format!("{data}/pgdata");
    let query = "psql -X -q -h \"$R\" -U slipway -d postgres -tAc 'select pg_is_in_recovery()'";
    format!(
        "set -e\nR={r}\n\
         trap 'pg_ctl -D {pg} -m fast stop >/dev/null 2>&1 || true' EXIT\n\
         {unpack}\
         touch {pg}/recovery.signal\n\
         pg_ctl -D {pg} -w -t 3600 -l \"$R/log\" -o \"-c listen_addresses='' \
         -c unix_socket_directories=$R -c archive_mode=off {settings} \
         -c restore_command='cp $R/wal/%f %p' -c recovery_target_time='{target}' \
         -c recovery_target_action=promote\" start >/dev/null || {{ tail -20 \"$R/log\" >&2; exit 1; }}\n\
         until [ \"$({query} 2>/dev/null)\" = f ]; do\n\
         pg_ctl -D {pg} status >/dev/null || {{ tail -20 \"$R/log\" >&2; exit 1; }}\n\
         sleep 0.2\ndone\n\
         psql -X -q -v ON_ERROR_STOP=1 -h \"$R\" -U slipway -d app -tA <<'SQL'\n\
         {COUNT_TABLES}\n\
         SQL\n\
         pg_ctl -D {pg} -m fast -w stop >/dev/null\ntrap - EXIT\n\
         rm -rf \"$R\" {pg}.manifest\n",
        settings = settings.join(" "),
        unpack = unpack_base("\"$R/base.tar\"", &pg),
    )
}

/// Redis's RDB (`redis-cli --rdb`, the server forks a save) into `{dir}/{file}`.
/// `REDISCLI_AUTH` is in the environment.
pub fn redis_dump(dir: &str, file: &str, host: &str, port: u16) -> String {
    format!(
        "set -e\ncd {dir}\nrm -f {file}.partial\n\
         redis-cli -h {host} -p {port} --no-auth-warning --rdb {file}.partial >&2\n\
         test -s {file}.partial\nmv {file}.partial {file}\n"
    )
}

/// `redis-check-rdb`'s reading of `{file}` and a throw-away server's after loading it, on
/// stdout; removed however it ends.
pub fn redis_verify(dir: &str, file: &str, name: &str) -> String {
    format!(
        "set -e\nV={dir}/.verify-{name}\nrm -rf \"$V\"\nmkdir -p \"$V\"\n\
         trap 'redis-cli -s \"$V/redis.sock\" shutdown nosave >/dev/null 2>&1 || true; rm -rf \"$V\"' EXIT\n\
         cp {dir}/{file} \"$V/dump.rdb\"\n\
         redis-check-rdb \"$V/dump.rdb\" > \"$V/check\" || {{ tail -5 \"$V/check\" >&2; exit 1; }}\n\
         grep -E 'keys read|already expired' \"$V/check\"\n\
         redis-server --port 0 --unixsocket \"$V/redis.sock\" --dir \"$V\" --dbfilename dump.rdb \
         --save '' --appendonly no --daemonize yes --logfile \"$V/log\"\n\
         i=0; until redis-cli -s \"$V/redis.sock\" ping 2>/dev/null | grep -q PONG; do \
         i=$((i+1)); [ $i -lt 600 ] || {{ cat \"$V/log\" >&2; exit 1; }}; sleep 0.1; done\n\
         redis-cli -s \"$V/redis.sock\" info keyspace\n"
    )
}

/// Restores `{path}` (`pg_dump -Fc`, or SQL text when `custom` is false) into a fresh
/// `app_restore` database of the server at `host:port`, its row counts on stdout; `app` is
/// not touched (`postgres_swap` puts it in place once the counts are right).
pub fn postgres_restore(path: &str, custom: bool, host: &str, port: u16) -> String {
    let server = format!("-h {host} -p {port} -U slipway");
    let load = match custom {
        true => {
            format!("pg_restore {server} -d app_restore --exit-on-error --no-owner --no-acl {path}")
        }
        false => {
            format!("psql -X -q -v ON_ERROR_STOP=1 {server} -d app_restore -f {path} >/dev/null")
        }
    };
    format!(
        "set -e\n\
         psql -X -q -v ON_ERROR_STOP=1 {server} -d postgres >/dev/null <<'SQL'\n\
         DROP DATABASE IF EXISTS app_restore WITH (FORCE);\n\
         CREATE DATABASE app_restore;\n\
         SQL\n\
         {load}\n\
         psql -X -q -v ON_ERROR_STOP=1 {server} -d app_restore -tA <<'SQL'\n\
         {COUNT_TABLES}\n\
         SQL\n"
    )
}

/// Puts `app_restore` in the place of `app` (its connections closed; the old one dropped).
pub fn postgres_swap(host: &str, port: u16) -> String {
    format!(
        "set -e\n\
         psql -X -q -v ON_ERROR_STOP=1 -h {host} -p {port} -U slipway -d postgres >/dev/null <<'SQL'\n\
         DROP DATABASE IF EXISTS app_before_restore WITH (FORCE);\n\
         ALTER DATABASE app ALLOW_CONNECTIONS false;\n\
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'app';\n\
         ALTER DATABASE app RENAME TO app_before_restore;\n\
         ALTER DATABASE app_restore RENAME TO app;\n\
         DROP DATABASE app_before_restore WITH (FORCE);\n\
         SQL\n"
    )
}

/// Makes `app` of the server at `host:port` refuse writes (`on`: its sessions closed, every
/// new transaction read-only) or take them again. `PGPASSWORD` is in the environment.
pub fn postgres_read_only(host: &str, port: u16, on: bool) -> String {
    let sql = match on {
        true => {
            "ALTER DATABASE app SET default_transaction_read_only = on;\n\
                 SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = 'app';"
        }
        false => "ALTER DATABASE app RESET default_transaction_read_only;",
    };
    format!(
        "set -e\n\
         psql -X -q -v ON_ERROR_STOP=1 -h {host} -p {port} -U slipway -d postgres >/dev/null <<'SQL'\n\
         {sql}\n\
         SQL\n"
    )
}

/// Makes the Redis server at `host:port` refuse writes (`on`) or take them again (the
/// default user's write commands taken away; not kept across a restart).
/// `REDISCLI_AUTH` is in the environment.
pub fn redis_read_only(host: &str, port: u16, on: bool) -> String {
    let rule = if on { "-@write" } else { "+@all" };
    format!(
        "redis-cli -h {host} -p {port} --no-auth-warning acl setuser default {rule} | grep -qx OK\n"
    )
}

/// The keys per database of the Redis server at `host:port` (`INFO keyspace`).
/// `REDISCLI_AUTH` is in the environment.
pub fn redis_keyspace(host: &str, port: u16) -> String {
    format!("redis-cli -h {host} -p {port} --no-auth-warning info keyspace\n")
}

/// The keys per database `INFO keyspace` printed.
pub fn parse_keyspace(output: &str) -> BTreeMap<String, u64> {
    output
        .lines()
        .filter_map(|line| {
            let (db, rest) = line.trim().split_once(":keys=")?;
            Some((db.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

/// The row counts a count query printed (`{"schema.table": rows}` per line).
pub fn parse_counts(output: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut counts = BTreeMap::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let object: BTreeMap<String, u64> =
            serde_json::from_str(line).map_err(|e| format!("unexpected output {line:?}: {e}"))?;
        counts.extend(object);
    }
    Ok(counts)
}

/// What the Redis verification printed: the keys per database the loaded server holds, and
/// whether that is what `redis-check-rdb` read (keys read less those already expired).
pub fn parse_redis_check(output: &str) -> Result<BTreeMap<String, u64>, String> {
    let number = |line: &str| -> u64 {
        line.split_whitespace()
            .find_map(|word| word.parse().ok())
            .unwrap_or(0)
    };
    let (mut read, mut expired) = (None, 0);
    let mut loaded = BTreeMap::new();
    for line in output.lines().map(str::trim) {
        if line.contains("keys read") {
            read = Some(number(line));
        } else if line.contains("already expired") {
            expired = number(line);
        } else if let Some((db, rest)) = line.split_once(":keys=") {
            let keys = rest.split(',').next().and_then(|k| k.parse().ok());
            loaded.insert(db.to_owned(), keys.unwrap_or(0));
        }
    }
    let read = read.ok_or("redis-check-rdb did not say how many keys it read")?;
    let total: u64 = loaded.values().sum();
    if total != read.saturating_sub(expired) {
        return Err(format!(
            "the RDB holds {read} keys ({expired} expired) but a server loading it holds {total}"
        ));
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_line_by_line() {
        let counts = parse_counts("{\"public.t\" : 2}\n\n{\"s.u v\" : 0}\n").unwrap();
        assert_eq!(counts["public.t"], 2);
        assert_eq!(counts["s.u v"], 0);
        assert!(parse_counts("ERROR: x").is_err());
        assert!(parse_counts("").unwrap().is_empty());
    }

    #[test]
    fn redis_counts_must_agree() {
        let output = "[info] 3 keys read\n[info] 1 already expired\n# Keyspace\r\n\
                      db0:keys=1,expires=0,avg_ttl=0\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n";
        let loaded = parse_redis_check(output).unwrap();
        assert_eq!(loaded["db0"], 1);
        assert_eq!(loaded["db2"], 1);
        let short = "[info] 3 keys read\n[info] 0 already expired\ndb0:keys=2,expires=0\n";
        assert!(parse_redis_check(short).unwrap_err().contains("holds 2"));
        assert!(parse_redis_check("db0:keys=2").is_err());
    }
}
