//! Encryption at rest: the codec's cost per record (seal and open of one payload of typical
//! sizes), and steps/s of the `cycle` workload on a `SealedStore` over a redb file, beside the
//! same workload on the plain store and, in `Sync` mode, raw redb commits.

use std::sync::Arc;
use std::time::Instant;

use agentflow::Durability;
use agentflow::prelude::*;
use agentflow::sealed::{Kek, RedbKeyStore, SealedStore, StaticKeyProvider};
use agentflow::{RedbStore, Store};
use serde_json::json;

use crate::floor::RawRedb;
use crate::support::{Config, TempPath, emit, median, mode_name, round1, round3, run_on, sample_pairs, thread_id};
use crate::workload_cycles::{Limit, cycle};

fn provider() -> StaticKeyProvider {
    StaticKeyProvider::new(Kek::new([0x42; 32]), vec![])
}

/// Nanoseconds per seal-and-open of one payload, for a few record sizes.
pub fn bench_codec(cfg: &Config) {
    let store =
        SealedStore::new(RedbStore::in_memory().expect("store"), agentflow::sealed::MemoryKeyStore::new(), provider());
    for size in [64usize, 1024, 16 * 1024, 64 * 1024] {
        let payload = vec![b'x'; size];
        let reps = if cfg.quick { 2_000 } else { 20_000 } * 1024 / size.max(1024);
        let mut per = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..reps {
                let opened = store.seal_and_open("codec-thread", &payload).expect("seal and open");
                assert_eq!(opened.len(), size);
            }
            per.push(t.elapsed().as_secs_f64() * 1e9 / reps as f64);
        }
        let ns = median(per);
        emit(json!({
            "bench": "sealed_codec",
            "payload_bytes": size,
            "ns_per_seal_and_open": round1(ns),
            "mb_per_s": round1(size as f64 / ns * 1e3),
            "quick": cfg.quick,
        }));
    }
}

/// The `cycle` workload on a fresh redb file, sealed or not.
/// (The app is dropped, closing the store, before the files are removed.)
struct Run {
    app: App<crate::workload_cycles::Cyc, Limit>,
    _file: TempPath,
    _keys: TempPath,
}

impl Run {
    fn new(sealed: bool) -> Self {
        let (file, keys) = (TempPath::new("cycle-sealed"), TempPath::new("cycle-sealed-keys"));
        let redb = RedbStore::open(&file.0).expect("open the store file");
        let store: Arc<dyn Store> = if sealed {
            Arc::new(SealedStore::new(redb, RedbKeyStore::open(&keys.0).expect("key store"), provider()))
        } else {
            Arc::new(redb)
        };
        Run { app: cycle::graph().app().store(store), _file: file, _keys: keys }
    }
}

/// Steps/s of `cycle` on a sealed store vs the plain store (pairs taken back to back), in
/// `Sync` also vs raw redb commits.
pub fn bench_cycle_sealed(cfg: &Config, rt: &tokio::runtime::Runtime, raw: &mut RawRedb) {
    for mode in [Durability::Sync, Durability::Async] {
        let n = if mode == Durability::Sync { cfg.sync_steps } else { cfg.eventual_steps };
        let deps = Arc::new(Limit { n });
        let (sealed, plain) = (Run::new(true), Run::new(false));
        let rate = |r: &Run| {
            let (run, took) = run_on(rt, &r.app, &deps, Default::default(), Some(mode), thread_id("cycle_sealed"));
            assert_eq!(u64::from(run.steps), n);
            n as f64 / took.as_secs_f64()
        };
        let (sealed_rate, plain_rate, vs_plain) = sample_pairs(cfg.ratio_pairs, || rate(&sealed), || rate(&plain));
        let mut line = json!({
            "bench": "cycle_sealed",
            "store": "redb_file+sealed",
            "durability": mode_name(Some(mode)),
            "steps": n,
            "samples": cfg.ratio_pairs,
            "steps_per_s": round1(sealed_rate),
            "us_per_step": round3(1e6 / sealed_rate),
            "plain_steps_per_s": round1(plain_rate),
            "vs_plain": round3(vs_plain),
            "quick": cfg.quick,
        });
        if mode == Durability::Sync {
            let (_, raw_rate, ratio) = sample_pairs(cfg.ratio_pairs, || rate(&sealed), || raw.rate(cfg.raw_ops));
            line["raw_redb_commits_per_s"] = json!(round1(raw_rate));
            line["vs_redb_raw"] = json!(round3(ratio));
        }
        drop((sealed, plain));
        emit(line);
    }
}
