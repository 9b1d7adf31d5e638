//! The floor under a `Sync` step: 4 KiB writes with `fdatasync`, and raw redb commits.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Config, TempPath, emit, round1, sample};

/// 4 KiB writes + fdatasync per second: overwriting a preallocated file, and appending.
pub fn bench_disk(cfg: &Config) {
    let file = TempPath::new("disk");
    let block = [0xA5u8; 4096];
    let region = 256u64;
    let overwrite = sample(cfg.samples, || {
        let mut f = File::create(&file.0).expect("disk probe file");
        for _ in 0..region {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
        let began = Instant::now();
        for i in 0..cfg.raw_ops as u64 {
            f.write_all_at(&block, (i % region) * 4096).unwrap();
            f.sync_data().unwrap();
        }
        began.elapsed()
    });
    let append = sample(cfg.samples, || {
        let mut f = File::create(&file.0).expect("disk probe file");
        f.sync_all().unwrap();
        let began = Instant::now();
        for _ in 0..cfg.raw_ops {
            f.write_all(&block).unwrap();
            f.sync_data().unwrap();
        }
        began.elapsed()
    });
    emit(json!({
        "bench": "disk",
        "op": "4KiB write + fdatasync",
        "dir": std::env::temp_dir(),
        "writes": cfg.raw_ops,
        "samples": cfg.samples,
        "writes_per_s": round1(cfg.raw_ops as f64 / overwrite),
        "us_per_write": round1(overwrite * 1e6 / cfg.raw_ops as f64),
        "append_writes_per_s": round1(cfg.raw_ops as f64 / append),
        "append_us_per_write": round1(append * 1e6 / cfg.raw_ops as f64),
        "quick": cfg.quick,
    }));
}

/// A plain redb file: one ~200-byte insert per write transaction, `Durability::Immediate`.
pub struct RawRedb {
    db: redb::Database,
    key: u64,
    _file: TempPath,
}

impl RawRedb {
    const TABLE: redb::TableDefinition<'static, u64, &'static [u8]> = redb::TableDefinition::new("raw");

    pub fn new() -> Self {
        let file = TempPath::new("redb-raw");
        let db = redb::Database::create(&file.0).expect("raw redb file");
        RawRedb { db, key: 0, _file: file }
    }

    /// Commits/s over `n` commits.
    pub fn rate(&mut self, n: usize) -> f64 {
        let value = [0x5Au8; 200];
        let began = Instant::now();
        for _ in 0..n {
            let mut txn = self.db.begin_write().unwrap();
            txn.set_durability(redb::Durability::Immediate).unwrap();
            {
                let mut table = txn.open_table(Self::TABLE).unwrap();
                table.insert(self.key, value.as_slice()).unwrap();
            }
            txn.commit().unwrap();
            self.key += 1;
        }
        n as f64 / began.elapsed().as_secs_f64()
    }
}

pub fn bench_redb_raw(cfg: &Config, raw: &mut RawRedb) {
    let rate = 1.0 / sample(cfg.samples, || Duration::from_secs_f64(1.0 / raw.rate(cfg.raw_ops)));
    emit(json!({
        "bench": "redb_raw",
        "op": "200 B insert + commit (Durability::Immediate)",
        "commits": cfg.raw_ops,
        "samples": cfg.samples,
        "commits_per_s": round1(rate),
        "us_per_commit": round1(1e6 / rate),
        "quick": cfg.quick,
    }));
}
