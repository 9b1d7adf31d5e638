//! Where a `Sync` step's time goes (`sync_breakdown`): the layers under it, from a raw redb
//! commit to the executor's step, measured back to back round by round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::{Durability, RedbStore, Store};
use serde_json::json;

use crate::floor::RawRedb;
use crate::support::{Config, Stored, TempPath, check_flat, emit, median, round1, round3, run_on, thread_id, with_cpu};
use crate::workload_cycles::{Flat, Limit, cycle_flat};

/// Raw redb commits shaped like a step's checkpoint row: a `(thread number, seq)` key and 300
/// bytes, each round under a thread number of its own, as each executor run is a thread of its
/// own.
struct ShapedRedb {
    db: redb::Database,
    rounds: u64,
    _file: TempPath,
}

impl ShapedRedb {
    const TABLE: redb::TableDefinition<'static, (u64, u64), &'static [u8]> = redb::TableDefinition::new("checkpoints");

    fn new() -> Self {
        let file = TempPath::new("redb-shaped");
        let db = redb::Database::create(&file.0).expect("shaped redb file");
        ShapedRedb { db, rounds: 0, _file: file }
    }

    fn run(&mut self, n: usize) {
        let value = [0x5Au8; 300];
        let thread = self.rounds;
        self.rounds += 1;
        for seq in 0..n as u64 {
            let mut txn = self.db.begin_write().unwrap();
            txn.set_durability(redb::Durability::Immediate).unwrap();
            {
                let mut table = txn.open_table(Self::TABLE).unwrap();
                table.insert((thread, seq), value.as_slice()).unwrap();
            }
            txn.commit().unwrap();
        }
    }
}

/// `Store::commit_step` called directly, with the checkpoint a `cycle_flat` step commits.
/// Each round commits a thread of its own (under its lease), as each executor run does.
struct DirectCommits {
    store: RedbStore,
    tag: &'static str,
    rounds: u64,
    _file: TempPath,
}

impl DirectCommits {
    const HOLDER: &'static str = "bench-holder";

    fn new(tag: &'static str) -> Self {
        let file = TempPath::new(tag);
        let store = RedbStore::open(&file.0).expect("open the store file");
        DirectCommits { store, tag, rounds: 0, _file: file }
    }

    fn run(&mut self, n: usize) {
        use agentflow_store::{Checkpoint, CheckpointMetadata, CheckpointSource, StepCommit, ThreadRecord};
        let thread = format!("{}-{}", self.tag, self.rounds);
        self.rounds += 1;
        self.store.acquire_lease(&thread, Self::HOLDER, 3_600_000, 1).expect("lease");
        // What the executor stores with every step of `cycle_flat`: the thread's budget, with no
        // limits set and nothing used (stored compact).
        let extra = json!({ "__budget__": {} });
        for seq in 1..=n as u64 {
            let record = ThreadRecord::new(&thread, "", "0123456789abcdef", 1, 1);
            let mut commit = StepCommit::new(record)
                .fenced_by(Self::HOLDER, 2)
                .with_durability(agentflow_store::Durability::Immediate);
            commit.checkpoint = Some(Checkpoint {
                thread: thread.clone(),
                seq,
                parent: (seq > 1).then(|| seq - 1),
                cursor: vec!["b".to_string()],
                snapshot: (seq == 1).then(|| br#"{"counter":0}"#.to_vec()),
                delta: vec![br#"{"update":{"counter":1},"next":["b"]}"#.to_vec()],
                metadata: CheckpointMetadata {
                    extra: extra.clone(),
                    ..CheckpointMetadata::new(seq, CheckpointSource::Loop, vec!["a".to_string()])
                },
                created_at: 3,
            });
            self.store.commit_step(commit).expect("commit");
        }
        self.store.release_lease(&thread, Self::HOLDER).expect("release the lease");
    }
}

/// Wall-clock and CPU microseconds per operation of each layer under a `Sync` step, the five
/// measured back to back in every round (medians over the rounds after the first), and each
/// layer's rate against the raw commit's.
pub fn bench_sync_breakdown(cfg: &Config, rt: &tokio::runtime::Runtime, raw: &mut RawRedb) {
    let n = cfg.sync_steps as usize;
    let graph = cycle_flat::graph();
    let stored = Stored::new("breakdown", graph);
    let deps = Arc::new(Limit { n: n as u64 });
    let (mut shaped, mut direct) = (ShapedRedb::new(), DirectCommits::new("direct"));
    const LAYERS: [&str; 5] =
        ["redb_raw", "raw_checkpoint_shape", "store_commit", "store_commit_in_task", "executor_step"];
    let mut wall: [Vec<f64>; 5] = Default::default();
    let mut cpu: [Vec<Duration>; 5] = Default::default();
    let mut in_task = Some(DirectCommits::new("in-task"));
    // `AGENTFLOW_BENCH_LAYERS=a,b` runs only those layers (to profile one alone); set but empty,
    // none of them (the setup alone: a profile's baseline to subtract).
    let profiled: Option<Vec<String>> = std::env::var("AGENTFLOW_BENCH_LAYERS")
        .ok()
        .map(|v| v.split(',').map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect());
    if let Some(unknown) = profiled.iter().flatten().find(|p| !LAYERS.contains(&p.as_str())) {
        eprintln!("AGENTFLOW_BENCH_LAYERS: no layer `{unknown}` (the layers: {})", LAYERS.join(", "));
        std::process::exit(2);
    }
    // As many rounds as a `vs_redb_raw` figure has pairs: each layer's ratio to the raw commit
    // is the median of its per-round ratios, like those.
    for round in 0..=cfg.ratio_pairs {
        for (layer, name) in LAYERS.iter().enumerate() {
            if profiled.as_ref().is_some_and(|layers| !layers.iter().any(|p| p == name)) {
                continue;
            }
            let mut took = Vec::new();
            let began = Instant::now();
            with_cpu(&mut took, || match *name {
                "redb_raw" => {
                    raw.rate(n);
                }
                "raw_checkpoint_shape" => shaped.run(n),
                "store_commit" => direct.run(n),
                "store_commit_in_task" => {
                    let mut commits = in_task.take().expect("the commits come back from their task");
                    commits = rt.block_on(async move {
                        tokio::spawn(async move {
                            tokio::task::block_in_place(|| commits.run(n));
                            commits
                        })
                        .await
                        .expect("bench task")
                    });
                    in_task = Some(commits);
                }
                _ => {
                    let (run, _) = run_on(
                        rt,
                        &stored.graph,
                        &deps,
                        Flat::default(),
                        Some(Durability::Sync),
                        thread_id("breakdown"),
                    );
                    check_flat(&run.state, n as u64);
                }
            });
            if round > 0 {
                wall[layer].push(began.elapsed().as_secs_f64() * 1e6 / n as f64);
                cpu[layer].extend(took.iter().map(|d| *d / n as u32));
            }
        }
    }
    let mut line = json!({ "bench": "sync_breakdown", "ops": n, "samples": cfg.ratio_pairs, "quick": cfg.quick });
    for (layer, name) in LAYERS.iter().enumerate().skip(1) {
        // This layer's operations per second over raw commits per second, round by round.
        let ratios: Vec<f64> = wall[0].iter().zip(&wall[layer]).map(|(raw, op)| raw / op).collect();
        if !ratios.is_empty() {
            // The same in the first, middle and last third of the rounds: the files grow with
            // every round, and a ratio that moves with their size shows here.
            if ratios.len() >= 3 {
                let third = ratios.len() / 3;
                let parts = [&ratios[..third], &ratios[third..ratios.len() - third], &ratios[ratios.len() - third..]];
                line[format!("{name}_vs_redb_raw_by_third")] = json!(parts.map(|part| round3(median(part.to_vec()))));
            }
            line[format!("{name}_vs_redb_raw")] = json!(round3(median(ratios)));
        }
    }
    for (layer, name) in LAYERS.iter().enumerate() {
        if wall[layer].is_empty() {
            continue;
        }
        line[format!("{name}_us")] = json!(round1(median(std::mem::take(&mut wall[layer]))));
        if !cpu[layer].is_empty() {
            let per_op = cpu[layer].iter().map(|d| d.as_secs_f64() * 1e6).collect();
            line[format!("{name}_cpu_us")] = json!(round1(median(per_op)));
        }
    }
    drop(direct);
    stored.close();
    emit(line);
}
