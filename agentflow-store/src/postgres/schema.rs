//! The tables of a [`PostgresStore`](super::PostgresStore) and their embedded, versioned
//! migrations.
//!
//! Every table lives in one PostgreSQL schema (`agentflow` unless configured). Opening a store
//! applies the migrations it lacks in one transaction, under a transaction-scoped advisory lock
//! keyed by the schema name, so processes that open the same store at once apply them exactly
//! once. `schema_version` records each applied version; a store whose highest version is newer
//! than this build knows is refused with [`OpenError::UnsupportedFormat`].
//!
//! Text keys use the `"C"` collation, so listings are ordered by bytes as with redb. Threads,
//! leases and audit entries are plain columns (an operator can query them); checkpoint rows and
//! approvals are stored in the crate's versioned binary encoding, with the columns that queries
//! filter on beside them. Audit details are JSON text.

use std::path::Path;

use crate::error::OpenError;
use crate::postgres::error::classify;

/// Migrations in order: index `i` brings the schema to version `i + 1`. `{s}` is the quoted
/// schema name. Never edit a released entry: append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: the initial layout.
    r#"
    CREATE TABLE {s}.threads (
        id text COLLATE "C" PRIMARY KEY,
        owner text NOT NULL,
        graph_fingerprint text NOT NULL,
        schema_version bigint NOT NULL,
        status text NOT NULL,
        detail text NOT NULL,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL
    );
    -- A row stays after release (holder NULL) so the fencing token keeps increasing.
    CREATE TABLE {s}.leases (
        thread text COLLATE "C" PRIMARY KEY,
        holder text,
        expires_at bigint NOT NULL,
        token bigint NOT NULL
    );
    CREATE TABLE {s}.checkpoints (
        thread text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        parent bigint,
        has_snapshot boolean NOT NULL,
        row bytea NOT NULL,
        snapshot bytea,
        PRIMARY KEY (thread, seq)
    );
    CREATE TABLE {s}.pending_writes (
        thread text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        node text COLLATE "C" NOT NULL,
        idx bigint NOT NULL,
        value bytea NOT NULL,
        PRIMARY KEY (thread, seq, node, idx)
    );
    CREATE TABLE {s}.effects (
        thread text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        node text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        result bytea NOT NULL,
        PRIMARY KEY (thread, seq, node, key)
    );
    CREATE TABLE {s}.audit (
        thread text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        at bigint NOT NULL,
        actor text NOT NULL,
        kind text NOT NULL,
        detail text NOT NULL,
        PRIMARY KEY (thread, seq)
    );
    -- The last audit seq per thread; its row lock orders concurrent appends.
    CREATE TABLE {s}.audit_heads (
        thread text COLLATE "C" PRIMARY KEY,
        last bigint NOT NULL
    );
    CREATE TABLE {s}.approvals (
        id text COLLATE "C" PRIMARY KEY,
        thread text COLLATE "C" NOT NULL,
        status text NOT NULL,
        record bytea NOT NULL
    );
    CREATE INDEX approvals_by_thread ON {s}.approvals (thread, id);
    CREATE INDEX approvals_pending ON {s}.approvals (id) WHERE status IN ('PENDING', 'OUTCOME_UNKNOWN');
    -- Store::flush updates this row with a synchronous commit.
    CREATE TABLE {s}.flush (id integer PRIMARY KEY, n bigint NOT NULL);
    INSERT INTO {s}.flush VALUES (1, 0);
    "#,
    // 2: the run queue that workers claim from (see `Store::enqueue_run`).
    r#"
    CREATE TABLE {s}.run_queue (
        thread text COLLATE "C" PRIMARY KEY,
        graph text NOT NULL,
        input bytea,
        owner text NOT NULL,
        enqueued_at bigint NOT NULL,
        wait text NOT NULL,
        control text,
        holder text,
        heartbeat_at bigint,
        claims integer NOT NULL
    );
    CREATE INDEX run_queue_claimable ON {s}.run_queue (graph, enqueued_at, thread);
    CREATE INDEX run_queue_by_holder ON {s}.run_queue (holder);
    "#,
    // 3: each thread's durable timer, indexed by when it is due. A column of the thread row
    // (written with it in every commit) rather than a table of its own, so a commit touches no
    // row shared with other threads and serializable transactions do not conflict over it.
    r#"
    ALTER TABLE {s}.threads ADD COLUMN wake_at bigint;
    CREATE INDEX threads_due ON {s}.threads (wake_at, id) WHERE wake_at IS NOT NULL;
    "#,
    // 4: one circuit breaker per tool, shared by every thread and process (see
    // `Store::update_breaker`); moved under the row's lock.
    r#"
    CREATE TABLE {s}.breakers (
        tool text COLLATE "C" PRIMARY KEY,
        state text NOT NULL,
        failures integer NOT NULL,
        open_until bigint NOT NULL,
        probe text,
        updated_at bigint NOT NULL
    );
    "#,
    // 5: each graph's description by fingerprint (see `Store::put_graph_description`).
    r#"
    CREATE TABLE {s}.graphs (
        fingerprint text COLLATE "C" PRIMARY KEY,
        description text NOT NULL
    );
    "#,
    // 6: the thread whose run started a thread as a subgraph child (`ThreadRecord::parent`).
    // The threads of earlier versions get the parent the shape of their id gave them then
    // (`ThreadRecord::legacy_parent`): the id up to its last `/`, when what follows is a
    // child's level `{node}[.{instance}].{seq}.{index}.{subgraph}`.
    r#"
    ALTER TABLE {s}.threads ADD COLUMN parent text COLLATE "C";
    UPDATE {s}.threads SET parent = substring(id FROM '^(.+)/[^/]*$')
        WHERE id ~ '^.+/[^./0-9][^./]*(\.[0-9]+)?\.[0-9]+\.[0-9]+\.[^./0-9][^./]*$';
    "#,
    // 7: the approvals a run parked for approvals waits on (`Settle::awaits`;
    // empty: any of its thread's and children's).
    r#"
    ALTER TABLE {s}.run_queue ADD COLUMN IF NOT EXISTS awaits text[] NOT NULL DEFAULT '{}';
    "#,
    // 8: a thread's subgraph children found without a scan (`Store::child_threads`).
    r#"
    CREATE INDEX IF NOT EXISTS threads_by_parent ON {s}.threads (parent, id) WHERE parent IS NOT NULL;
    "#,
    // 9: the tenant a thread belongs to (`ThreadRecord::tenant`, fixed when the thread is
    // created) and the tenant a queued run was submitted for (`NewRun::tenant`), and the audit log's hash chain (`crate::audit_chain`): each entry's
    // `detail_hash` and `link`, and beside each thread's last seq the link of its last entry
    // (what the next append chains to). The existing logs are chained by `chain_audit` in the
    // same transaction, as they stand.
    r#"
    ALTER TABLE {s}.threads ADD COLUMN IF NOT EXISTS tenant text COLLATE "C";
    ALTER TABLE {s}.run_queue ADD COLUMN IF NOT EXISTS tenant text COLLATE "C";
    ALTER TABLE {s}.audit ADD COLUMN IF NOT EXISTS detail_hash text NOT NULL DEFAULT '';
    ALTER TABLE {s}.audit ADD COLUMN IF NOT EXISTS link text NOT NULL DEFAULT '';
    ALTER TABLE {s}.audit_heads ADD COLUMN IF NOT EXISTS link text NOT NULL DEFAULT '';
    "#,
    // 10: legal holds (`Store::set_legal_hold`), and thread status `purged`, which older builds
    // cannot read (`Store::purge_thread`).
    r#"
    CREATE TABLE IF NOT EXISTS {s}.holds (
        thread text COLLATE "C" PRIMARY KEY,
        held_by text NOT NULL,
        reason text NOT NULL,
        at bigint NOT NULL
    );
    "#,
    // 11: the W3C `traceparent` of a thread's root span (`ThreadRecord::trace`): the first one
    // stored wins, a purge clears it. The threads of earlier versions have none.
    r#"
    ALTER TABLE {s}.threads ADD COLUMN IF NOT EXISTS trace text;
    "#,
    // 12: each thread's event log (`Store::read_events`): its events by (seq, idx), and beside
    // it the log's last seq, whose row lock orders a thread's appends and which a purge keeps
    // so the seqs never start again; the idempotency keys of run starts
    // (`NewRun::idempotency`), by (scope, key), with their thread (for a purge) and age (expired
    // ones are removed); a queued run's follow-up, fork and webhook fields, and how many
    // follow-up runs wait behind it (kept under the row's lock, so a settle sees them), the
    // follow-up runs by (thread, place); cron schedules; and webhook deliveries.
    r#"
    CREATE TABLE IF NOT EXISTS {s}.events (
        thread text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        idx bigint NOT NULL,
        kind text NOT NULL,
        data bytea NOT NULL,
        at bigint NOT NULL,
        PRIMARY KEY (thread, seq, idx)
    );
    CREATE TABLE IF NOT EXISTS {s}.event_heads (
        thread text COLLATE "C" PRIMARY KEY,
        last bigint NOT NULL
    );
    CREATE TABLE IF NOT EXISTS {s}.idempotency_keys (
        scope text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        thread text COLLATE "C" NOT NULL,
        request text NOT NULL,
        created bigint NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX IF NOT EXISTS idempotency_keys_by_thread ON {s}.idempotency_keys (thread);
    CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON {s}.idempotency_keys (created);
    ALTER TABLE {s}.run_queue ADD COLUMN IF NOT EXISTS follow_up boolean NOT NULL DEFAULT false;
    ALTER TABLE {s}.run_queue ADD COLUMN IF NOT EXISTS fork_from bigint;
    ALTER TABLE {s}.run_queue ADD COLUMN IF NOT EXISTS webhook text;
    ALTER TABLE {s}.run_queue ADD COLUMN IF NOT EXISTS follow_ups integer NOT NULL DEFAULT 0;
    CREATE TABLE IF NOT EXISTS {s}.follow_ups (
        thread text COLLATE "C" NOT NULL,
        pos bigint NOT NULL,
        graph text NOT NULL,
        input bytea,
        owner text NOT NULL,
        enqueued_at bigint NOT NULL,
        tenant text COLLATE "C",
        fork_from bigint,
        webhook text,
        PRIMARY KEY (thread, pos)
    );
    CREATE TABLE IF NOT EXISTS {s}.schedules (
        id text COLLATE "C" PRIMARY KEY,
        graph text NOT NULL,
        cron text NOT NULL,
        input bytea NOT NULL,
        owner text NOT NULL,
        tenant text COLLATE "C",
        webhook text,
        next_at bigint NOT NULL,
        created_at bigint NOT NULL,
        last_fired_at bigint,
        last_thread text COLLATE "C"
    );
    CREATE TABLE IF NOT EXISTS {s}.webhooks (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        thread text COLLATE "C" NOT NULL,
        url text NOT NULL,
        payload bytea NOT NULL,
        created_at bigint NOT NULL,
        attempts integer NOT NULL,
        next_at bigint NOT NULL,
        status text NOT NULL,
        last_error text,
        holder text,
        held_until bigint NOT NULL
    );
    CREATE INDEX IF NOT EXISTS webhooks_by_thread ON {s}.webhooks (thread, id);
    CREATE INDEX IF NOT EXISTS webhooks_due ON {s}.webhooks (next_at, id) WHERE status = 'PENDING';
    "#,
    // 13: a queued run may be held behind a thread that waits outside the queue (`wait` =
    // 'HELD', `RunWait::Held`), which older builds cannot read; follow-ups put at the front take
    // negative places in the order they were put there (the index finds them).
    r#"
    CREATE INDEX IF NOT EXISTS follow_ups_front ON {s}.follow_ups (thread, pos) WHERE pos < 0;
    "#,
];

/// The version whose migration adds the audit chain's columns, after which [`chain_audit`]
/// chains the logs written before.
const CHAINED_VERSION: u32 = 9;

/// The version of the PostgreSQL tables this build creates and reads (the number of its
/// migrations). A schema at a higher version is refused on open.
pub const POSTGRES_SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Whether `name` is a plain lowercase SQL identifier (what a schema name may be here).
pub(crate) fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Creates the schema if needed and applies the missing migrations, all in one transaction.
pub(crate) async fn migrate(client: &mut tokio_postgres::Client, schema: &str, path: &Path) -> Result<u32, OpenError> {
    let db = |e: tokio_postgres::Error| OpenError::Storage(classify(path, &e, 1));
    let s = format!("\"{schema}\"");
    let tx = client.transaction().await.map_err(db)?;
    // Serialises concurrent openers of this schema until the transaction ends.
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&format!("agentflow-store:{schema}")])
        .await
        .map_err(db)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {s}.schema_version (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .map_err(db)?;
    let row = tx.query_one(&format!("SELECT max(version) FROM {s}.schema_version"), &[]).await.map_err(db)?;
    let found = crate::postgres::sql::col::<Option<i32>>(path, "schema_version", &row, 0)?.unwrap_or(0);
    let found = u32::try_from(found).unwrap_or(0);
    if found > POSTGRES_SCHEMA_VERSION {
        return Err(OpenError::UnsupportedFormat {
            path: path.to_path_buf(),
            found: found.to_string(),
            supported: POSTGRES_SCHEMA_VERSION.to_string(),
        });
    }
    for version in found + 1..=POSTGRES_SCHEMA_VERSION {
        let sql = MIGRATIONS[(version - 1) as usize].replace("{s}", &s);
        tx.batch_execute(&sql).await.map_err(db)?;
        tx.execute(&format!("INSERT INTO {s}.schema_version (version) VALUES ($1)"), &[&(version as i32)])
            .await
            .map_err(db)?;
        if version == CHAINED_VERSION {
            chain_audit(&tx, &s).await.map_err(db)?;
        }
    }
    tx.commit().await.map_err(db)?;
    Ok(POSTGRES_SCHEMA_VERSION)
}

/// Chains the audit logs written before schema version 9, thread by thread in seq order, and
/// records each thread's last link in `audit_heads`. A detail that is not JSON is left without
/// hashes (reading it reports it, as before) and the next entry chained after the last that had.
async fn chain_audit(tx: &tokio_postgres::Transaction<'_>, s: &str) -> Result<(), tokio_postgres::Error> {
    let threads = tx.query(&format!("SELECT DISTINCT thread FROM {s}.audit WHERE link = ''"), &[]).await?;
    for t in threads {
        let thread: String = t.try_get(0)?;
        let rows = tx
            .query(
                &format!("SELECT seq, at, actor, kind, detail FROM {s}.audit WHERE thread = $1 ORDER BY seq"),
                &[&thread],
            )
            .await?;
        let (mut seqs, mut hashes, mut links) = (Vec::new(), Vec::new(), Vec::new());
        let mut prev = String::new();
        for r in rows {
            let seq: i64 = r.try_get(0)?;
            let at: i64 = r.try_get(1)?;
            let detail: String = r.try_get(4)?;
            let Ok(detail) = serde_json::from_str::<serde_json::Value>(&detail) else { continue };
            let hash = crate::audit_chain::detail_hash(&detail);
            let link = crate::audit_chain::link(
                &prev,
                &thread,
                u64::try_from(seq).unwrap_or(0),
                u64::try_from(at).unwrap_or(0),
                &r.try_get::<_, String>(2)?,
                &r.try_get::<_, String>(3)?,
                &hash,
            );
            seqs.push(seq);
            hashes.push(hash);
            prev.clone_from(&link);
            links.push(link);
        }
        tx.execute(
            &format!(
                "UPDATE {s}.audit a SET detail_hash = u.hash, link = u.link \
                 FROM unnest($2::bigint[], $3::text[], $4::text[]) AS u(seq, hash, link) \
                 WHERE a.thread = $1 AND a.seq = u.seq"
            ),
            &[&thread, &seqs, &hashes, &links],
        )
        .await?;
        tx.execute(&format!("UPDATE {s}.audit_heads SET link = $2 WHERE thread = $1"), &[&thread, &prev]).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(valid_schema_name("agentflow"));
        assert!(valid_schema_name("_t1_x"));
        assert!(!valid_schema_name(""));
        assert!(!valid_schema_name("1abc"));
        assert!(!valid_schema_name("Agentflow"));
        assert!(!valid_schema_name("a\"; DROP TABLE x; --"));
        assert!(!valid_schema_name(&"a".repeat(64)));
    }
}
