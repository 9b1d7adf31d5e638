//! Each thread's event log on PostgreSQL: table `events` (by thread, seq, idx) and, beside it,
//! `event_heads` (each thread's last seq). A step commit with events appends them in its own
//! transaction with [`APPEND`] (one statement, pipelined with the commit's other writes), which
//! also trims the log and notifies the schema's channel; [`read`] reads a page in one statement.

use sha2::{Digest, Sha256};

use crate::error::StorageError;
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, col, uint};
use crate::record::{EventId, EventPage, StoredEvent};

/// Appends the events `$2` (kinds) and `$3` (data) of thread `$1`, written at `$4`, as the log's
/// next commit: the thread's `event_heads` row moves to the next seq (its row lock orders the
/// thread's appends), the events get that seq and their places, the seqs `$5` and more below
/// it go, and channel `$6` is told the thread's id (delivered when the transaction commits; a
/// thread id too long for a notification's payload, 8000 bytes, is not told: its readers poll).
pub(crate) const APPEND: &str = "WITH head AS (INSERT INTO event_heads AS h (thread, last) VALUES ($1, 1) \
       ON CONFLICT (thread) DO UPDATE SET last = h.last + 1 RETURNING h.last), \
     added AS (INSERT INTO events (thread, seq, idx, kind, data, at) \
       SELECT $1, head.last, e.n - 1, e.kind, e.data, $4 \
       FROM head, unnest($2::text[], $3::bytea[]) WITH ORDINALITY AS e(kind, data, n)), \
     trimmed AS (DELETE FROM events WHERE thread = $1 AND seq <= (SELECT last FROM head) - $5) \
     SELECT pg_notify($6, $1) WHERE octet_length($1) < 8000";

/// The events of thread `$1` after (`$2`, `$3`), at most `$4` (part 0), its oldest event
/// (part 1) and its newest (part 2): one statement, so one snapshot.
const READ: &str = "(SELECT 0 AS part, seq, idx, kind, data, at FROM events \
       WHERE thread = $1 AND (seq, idx) > ($2, $3) ORDER BY seq, idx LIMIT $4) \
     UNION ALL (SELECT 1, seq, idx, '', '\\x'::bytea, 0 FROM events WHERE thread = $1 ORDER BY seq, idx LIMIT 1) \
     UNION ALL (SELECT 2, seq, idx, '', '\\x'::bytea, 0 FROM events WHERE thread = $1 \
       ORDER BY seq DESC, idx DESC LIMIT 1)";

/// The longest identifier PostgreSQL keeps whole (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER: usize = 63;

/// The channel the commits of the store in `schema` notify: `agentflow_events_<schema>`, or,
/// when that is longer than an identifier may be, the schema's first 24 characters and 16 hex
/// digits of its SHA-256. A valid schema name (lowercase letters, digits, `_`) makes a name
/// that needs no quoting beyond the double quotes `LISTEN` puts around it.
pub(crate) fn channel(schema: &str) -> String {
    let name = format!("agentflow_events_{schema}");
    if name.len() <= MAX_IDENTIFIER {
        return name;
    }
    let digest = Sha256::digest(schema.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let head: String = schema.chars().take(24).collect();
    format!("agentflow_events_{head}_{hex}")
}

/// A page of `thread`'s log (see [`Store::read_events`](crate::Store::read_events)).
pub(crate) async fn read(
    ctx: &PgPool,
    thread: &str,
    after: Option<EventId>,
    limit: usize,
) -> Result<EventPage, StorageError> {
    let client = ctx.client().await?;
    // Stored seqs fit a `bigint`: an id past it is after every event.
    let (seq, idx) = match after {
        None => (0, -1),
        Some(id) => (i64::try_from(id.seq).unwrap_or(i64::MAX), i64::from(id.idx)),
    };
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = sql::query(&client, READ, &[&thread, &seq, &idx, &limit]).await.map_err(|e| ctx.db(&e))?;
    let (mut events, mut oldest, mut newest) = (Vec::new(), None, None);
    for row in &rows {
        let part: i32 = col(&ctx.path, "events", row, 0)?;
        let (seq, idx): (i64, i64) = (col(&ctx.path, "events", row, 1)?, col(&ctx.path, "events", row, 2)?);
        let key = || format!("({thread:?}, {seq}, {idx})");
        let id = EventId::new(
            uint(&ctx.path, "events", key, seq)?,
            u32::try_from(idx).map_err(|_| {
                crate::postgres::error::decode_error(&ctx.path, "events", key(), format!("event place {idx}"))
            })?,
        );
        match part {
            0 => {
                let at = uint(&ctx.path, "events", key, col(&ctx.path, "events", row, 5)?)?;
                let (kind, data): (String, Vec<u8>) =
                    (col(&ctx.path, "events", row, 3)?, col(&ctx.path, "events", row, 4)?);
                events.push(StoredEvent::new(id, kind, data, at));
            }
            1 => oldest = Some(id),
            _ => newest = Some(id),
        }
    }
    events.sort_by_key(|e| e.id);
    Ok(EventPage::new(events, oldest, newest))
}

/// Every event thread `thread`'s log keeps, oldest first, read on `c` (a dump's snapshot).
pub(crate) async fn all_on<C: deadpool_postgres::GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
) -> Result<Vec<StoredEvent>, StorageError> {
    let rows =
        sql::query(c, "SELECT seq, idx, kind, data, at FROM events WHERE thread = $1 ORDER BY seq, idx", &[&thread])
            .await
            .map_err(|e| ctx.db(&e))?;
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        let (seq, idx): (i64, i64) = (col(&ctx.path, "events", row, 0)?, col(&ctx.path, "events", row, 1)?);
        let key = || format!("({thread:?}, {seq}, {idx})");
        let idx = u32::try_from(idx).map_err(|_| {
            crate::postgres::error::decode_error(&ctx.path, "events", key(), format!("event place {idx}"))
        })?;
        let at = uint(&ctx.path, "events", key, col(&ctx.path, "events", row, 4)?)?;
        let (kind, data): (String, Vec<u8>) = (col(&ctx.path, "events", row, 2)?, col(&ctx.path, "events", row, 3)?);
        events.push(StoredEvent::new(EventId::new(uint(&ctx.path, "events", key, seq)?, idx), kind, data, at));
    }
    Ok(events)
}

/// Writes a restored thread's log as it was, ids and all, in the caller's transaction, and
/// moves the log's last seq to its newest (never back), so its next commit goes on after it.
pub(crate) async fn restore<C: deadpool_postgres::GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    events: &[StoredEvent],
) -> Result<(), crate::postgres::error::Fail<crate::error::CommitError>> {
    let Some(newest) = events.last() else { return Ok(()) };
    let mut seqs = Vec::with_capacity(events.len());
    for e in events {
        seqs.push(sql::int(&ctx.path, "event seq", e.id.seq)?);
    }
    let idxs: Vec<i64> = events.iter().map(|e| i64::from(e.id.idx)).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let data: Vec<&[u8]> = events.iter().map(|e| e.data.as_slice()).collect();
    let ats: Vec<i64> = events.iter().map(|e| sql::time(e.at)).collect();
    sql::execute(
        c,
        "INSERT INTO events (thread, seq, idx, kind, data, at) \
         SELECT $1, e.seq, e.idx, e.kind, e.data, e.at \
         FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bytea[], $6::bigint[]) AS e(seq, idx, kind, data, at)",
        &[&thread, &seqs, &idxs, &kinds, &data, &ats],
    )
    .await?;
    let last = sql::int(&ctx.path, "event seq", newest.id.seq)?;
    sql::execute(
        c,
        "INSERT INTO event_heads AS h (thread, last) VALUES ($1, $2) \
         ON CONFLICT (thread) DO UPDATE SET last = GREATEST(h.last, EXCLUDED.last)",
        &[&thread, &last],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::channel;

    #[test]
    fn a_channel_is_an_identifier_of_the_schema() {
        assert_eq!(channel("agentflow"), "agentflow_events_agentflow");
        let long = "s".repeat(63);
        let named = channel(&long);
        assert!(named.len() <= 63 && named.starts_with("agentflow_events_ssss"), "{named}");
        assert_ne!(named, channel(&"s".repeat(62)), "two long schemas get two channels");
    }
}
