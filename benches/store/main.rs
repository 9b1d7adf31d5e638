//! Persistence benchmarks: the executor with a `RedbStore` file. One JSON line
//! per figure on stdout; no timing is asserted, only the results of the work.
//!
//! ```text
//! cargo bench --bench store              # full
//! cargo bench --bench store -- --quick   # CI smoke check, < 20 s
//! AGENTFLOW_BENCH_QUICK=1 cargo bench --bench store
//! AGENTFLOW_BENCH_PAIRS=41 cargo bench --bench store -- cycle sync_breakdown
//! ```
//!
//! The workloads of `benches/engine.rs` (`cycle_flat`, `cycle`, `fanout`) run
//! as threads (`.thread(id)`) on a store file under the system temp dir, in
//! each durability mode. To make ratios meaningful on a noisy or unknown
//! machine, the same run also measures the floor under a `Sync` step:
//! - `disk`: 4 KiB write + `fdatasync` (`File::sync_data`) on a preallocated
//!   file, and the same appending to the file;
//! - `redb_raw`: one ~200-byte insert per redb write transaction with
//!   `redb::Durability::Immediate` (redb's defaults otherwise: one fsync per
//!   commit).
//!
//! Figures, with the targets of the persistence issue (printed as `target`
//! and `met`, never asserted):
//! - `Sync` steps/s of `cycle_flat` and `cycle` vs raw redb commits/s [>= 0.95x],
//!   the median of 11 pairs (5 with `--quick`), every other pair raw side first;
//!   beside it, the process CPU time per step and per raw commit and their
//!   ratio (`cpu_vs_redb_raw`, Linux only), which a shared machine's load
//!   moves much less than the wall-clock one. With `TMPDIR` on a tmpfs
//!   (`TMPDIR=/dev/shm`) an fsync costs nothing and the ratio shows the CPU
//!   cost of a step alone;
//! - `fanout` (8 branches) in `Sync` mode, ms per run [< 2 ms];
//! - 16 concurrent runs on distinct threads in `Sync` mode: aggregate steps/s
//!   vs one run alone [>= 3x] (group commit);
//! - after a 3000-step thread: `graph.state` [< 0.1 ms] on `cycle_flat` and
//!   on `cycle` (whose 3000-entry log is also copied once in memory, the
//!   floor for any read that returns it owned), and `graph.history` of the
//!   `cycle` thread [< 20 ms];
//! - store size of a `cycle` thread after 500, 1000, 2000 steps [linear,
//!   < 1.5 MB at 2000]: file size after `close()` and the sum of `payload_bytes`.
//!
//! - encryption at rest (`cycle_sealed`): ns per seal and open of one payload
//!   of 64 B to 64 KiB (`sealed_codec`), and steps/s of `cycle` on a
//!   `SealedStore` over a redb file, `Sync` and `Async`, beside the plain store
//!   (`vs_plain`, pairs back to back) and in `Sync` raw redb commits
//!   (`vs_redb_raw`).
//!
//! - durable commits per approved tool call (`approved_call`): counted by a
//!   `Store` wrapper from just after the approver's decision to the end of
//!   the resumed run, step commits apart from the gateway's own writes.
//!
//! - where a `Sync` step's time goes (`sync_breakdown`), wall-clock and CPU
//!   per operation, each measured back to back in every round: the raw redb
//!   commit above; the same with the checkpoint table's key type, a
//!   300-byte row and a thread number of its own each round, as each
//!   executor run has (`raw_checkpoint_shape`: what the data's shape costs
//!   redb);
//!   `Store::commit_step` called directly with a step's checkpoint, a
//!   thread of its own each round taken under a lease and let go
//!   (`store_commit`: the store's own work on top); the same from a task
//!   spawned on the runtime, through `block_in_place` as the executor calls it
//!   (`store_commit_in_task`: what running there costs); and the executor's
//!   `Sync` step of `cycle_flat` (`executor_step`: the executor's work on top).
//!   As many rounds as a `vs_redb_raw` figure has pairs; beside each layer's
//!   medians, `<layer>_vs_redb_raw` is the median over the rounds of that
//!   layer's operations/s over raw commits/s, so the same target reads layer
//!   by layer, and `<layer>_vs_redb_raw_by_third` the same median in the
//!   first, middle and last third of the rounds (every file grows with each
//!   round: a ratio that moves with their size shows there).
//!   `AGENTFLOW_BENCH_LAYERS=executor_step` (a comma-separated
//!   list of layer names) runs only those layers, to profile one alone;
//!   `AGENTFLOW_BENCH_LAYERS=` (set, empty) runs none, for the baseline a
//!   profile subtracts. A ratio is printed only for a layer that ran beside
//!   `redb_raw`.
//!
//! `AGENTFLOW_BENCH_PAIRS=N` sets the pairs (and breakdown rounds) to `N`:
//! one run's median moves less with more of them.
//!
//! Every run uses a tokio `multi_thread` runtime with 2 workers, the run
//! spawned onto a worker. A `Sync` step is committed on the run's own thread
//! (`block_in_place`) when the store is idle, and otherwise by the store's
//! writer thread, shared with the commits queued beside it.

use std::path::Path;
use std::time::Instant;

// ---------------------------------------------------------------------------
// Workloads (as in benches/engine.rs).

#[path = "../workloads/cycles.rs"]
mod workload_cycles;
use workload_cycles::{cycle, cycle_flat};

#[path = "../workloads/approved.rs"]
mod workload_approved;

#[path = "../workloads/fanout.rs"]
mod workload_fanout;

// ---------------------------------------------------------------------------
// The figures, a module per group; `support` holds the configuration and what they share.

mod approved;
mod cycles;
mod floor;
mod parallel;
mod reads;
mod sealed;
mod size;
mod support;
mod sync_breakdown;

use approved::bench_approved;
use cycles::bench_cycles;
use floor::{RawRedb, bench_disk, bench_redb_raw};
use parallel::{bench_concurrent, bench_fanout};
use reads::{bench_reads, bench_reads_flat};
use size::bench_size;
use support::{Config, check_cycle, check_flat, runtime};
use sync_breakdown::bench_sync_breakdown;

fn main() {
    let cfg = Config::from_env();
    let began = Instant::now();
    let rt = runtime();
    let mut raw = RawRedb::new();
    bench_disk(&cfg);
    bench_redb_raw(&cfg, &mut raw);
    if cfg.selected("cycle_flat") {
        bench_cycles(&cfg, &rt, &mut raw, "cycle_flat", cycle_flat::graph(), check_flat);
    }
    if cfg.selected("cycle") {
        bench_cycles(&cfg, &rt, &mut raw, "cycle", cycle::graph(), check_cycle);
    }
    if cfg.selected("cycle_sealed") {
        sealed::bench_codec(&cfg);
        sealed::bench_cycle_sealed(&cfg, &rt, &mut raw);
    }
    if cfg.selected("sync_breakdown") {
        bench_sync_breakdown(&cfg, &rt, &mut raw);
    }
    if cfg.selected("fanout") {
        bench_fanout(&cfg, &rt, &mut raw);
    }
    if cfg.selected("concurrent") {
        bench_concurrent(&cfg, &rt);
    }
    if cfg.selected("read") {
        bench_reads_flat(&cfg, &rt);
        bench_reads(&cfg, &rt);
    }
    if cfg.selected("size") {
        bench_size(&cfg, &rt);
    }
    if cfg.selected("approved") {
        bench_approved(&cfg, &rt);
    }
    eprintln!(
        "store bench ({}) done in {:.1} s, files under {}",
        if cfg.quick { "quick" } else { "full" },
        began.elapsed().as_secs_f64(),
        Path::new(&std::env::temp_dir()).display()
    );
}
