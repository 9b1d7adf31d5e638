//! Compacting a thread of a [`RedbStore`]: dropping old checkpoints, folding
//! the retained ones whose chain reached a dropped one, in one write transaction.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{CompactError, ReadError};
use crate::record::{CheckpointSummary, Snapshot};
use crate::redb::effects::remove_effects_below;
use crate::redb::error::WithPath;
use crate::redb::purge::{hold_above, hold_in};
use crate::redb::reads;
use crate::redb::redb_store::RedbStore;
use crate::redb::step_commit::remove_pending;
use crate::redb::tables;
use crate::redb::thread_numbers::{self, Numbered};
use crate::store::FoldFn;

impl RedbStore {
    /// The data part of [`Store::compact`](crate::Store::compact), in one immediate write transaction taken on the
    /// calling thread (the fold callback cannot travel to the writer thread).
    pub(super) fn compact_thread(
        &self,
        thread: &str,
        keep: usize,
        fold: &FoldFn<'_>,
    ) -> Result<(usize, usize), CompactError> {
        let path = self.shared.path.as_path();
        // Made outside the writer: hold its turn, so no job stages meanwhile, and forget the
        // thread facts, which this changes under the step commits (see `step_facts`).
        let _turn = self.shared.turn();
        self.shared.facts.clear();
        let db = self.shared.db();
        let txn = db.begin_write().ctx(path)?;
        let mut folded = 0;
        let mut dropped_seqs = Vec::new();
        'compact: {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let record = reads::thread_record(path, &threads, &self.shared.leases, thread)?
                .ok_or_else(|| CompactError::UnknownThread { thread: thread.to_string() })?;
            if !record.status.is_finished() {
                return Err(CompactError::NotFinished { thread: thread.to_string(), status: record.status });
            }
            // A legal hold keeps the whole history of the thread and of its subgraph children.
            let holds = txn.open_table(tables::HOLDS).ctx(path)?;
            let held = match hold_in(path, &holds, thread)? {
                Some(hold) => Some((thread.to_string(), hold)),
                None => hold_above(path, &threads, &holds, record.parent.clone())?,
            };
            if let Some((held, hold)) = held {
                return Err(CompactError::Held { thread: thread.to_string(), held, hold });
            }
            drop(holds);
            // A resume of the thread may still look its journal up under a dropped checkpoint's
            // seq (see `Store::compact`): only a thread no resume runs loses its effects.
            let drop_effects = !record.status.is_resumable();
            let number = thread_numbers::number_of(path, &txn.open_table(tables::THREAD_NUMBERS).ctx(path)?, thread)?;
            let numbered = number.map(|number| Numbered { id: thread, number });
            let mut checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let mut snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            let all = reads::summaries(path, &checkpoints, numbered)?;
            let split = all.len().saturating_sub(keep);
            // No resume runs: the journal below the oldest retained checkpoint goes, what this
            // compaction drops and what earlier ones kept for a resume that has happened since.
            if drop_effects && let Some(oldest) = all.get(split) {
                let mut effects = txn.open_table(tables::EFFECTS).ctx(path)?;
                remove_effects_below(path, &mut effects, thread, oldest.seq)?;
            }
            let Some(numbered) = numbered.filter(|_| split > 0) else {
                break 'compact;
            };
            let dropped: BTreeSet<u64> = all[..split].iter().map(|s| s.seq).collect();
            let mut by_seq: BTreeMap<u64, CheckpointSummary> = all.into_iter().map(|s| (s.seq, s)).collect();
            let retained: Vec<u64> = by_seq.keys().copied().skip(split).collect();
            // Ascending order: a retained parent is made self-sufficient before its children.
            for seq in retained {
                if !needs_fold(&by_seq, &dropped, seq) {
                    continue;
                }
                let chain =
                    reads::state_chain(path, &checkpoints, &snapshots, Some(numbered), seq)?.ok_or_else(|| {
                        ReadError::BrokenChain {
                            path: path.to_path_buf(),
                            thread: thread.to_string(),
                            seq,
                            missing: seq,
                        }
                    })?;
                let snapshot =
                    fold(&chain).map_err(|source| CompactError::Fold { thread: thread.to_string(), seq, source })?;
                let (mut summary, delta) = reads::row(path, &checkpoints, numbered, seq)?.ok_or_else(|| {
                    ReadError::BrokenChain { path: path.to_path_buf(), thread: thread.to_string(), seq, missing: seq }
                })?;
                summary.has_snapshot = true;
                summary.payload_bytes = (snapshot.len() + delta.iter().map(Vec::len).sum::<usize>()) as u64;
                snapshots.insert(numbered.key(seq), Snapshot::encode(&snapshot).as_slice()).ctx(path)?;
                checkpoints.insert(numbered.key(seq), summary.encode_row(&delta).as_slice()).ctx(path)?;
                by_seq.insert(seq, summary);
                folded += 1;
            }
            let mut pending = txn.open_table(tables::PENDING_WRITES).ctx(path)?;
            for &seq in &dropped {
                checkpoints.remove(numbered.key(seq)).ctx(path)?;
                snapshots.remove(numbered.key(seq)).ctx(path)?;
                remove_pending(path, &mut pending, thread, seq)?;
                dropped_seqs.push(seq);
            }
        }
        txn.commit().ctx(path)?;
        Ok((dropped_seqs.len(), folded))
    }
}

/// Whether the chain of retained checkpoint `seq` reaches a dropped checkpoint before a
/// snapshot.
fn needs_fold(by_seq: &BTreeMap<u64, CheckpointSummary>, dropped: &BTreeSet<u64>, seq: u64) -> bool {
    let mut cur = seq;
    loop {
        let Some(summary) = by_seq.get(&cur) else {
            return false;
        };
        if summary.has_snapshot {
            return false;
        }
        match summary.parent {
            Some(parent) if dropped.contains(&parent) => return true,
            Some(parent) if parent < cur => cur = parent,
            _ => return false,
        }
    }
}
