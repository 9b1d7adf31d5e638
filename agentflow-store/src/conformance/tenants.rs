//! A thread's tenant: written when the thread is created, kept by every later write; and the
//! tenant a queued run was submitted for.

use crate::conformance::fixtures::{NOW, root, step, thread};
use crate::{NewRun, StepCommit, Store, ThreadDump};

/// The tenant of a thread's first commit is the thread's: later commits whose record says no
/// tenant or another one leave it as it was, [`Store::thread`] and [`Store::list_threads`]
/// answer it, a thread created without one has none, and a restored thread has its dump's.
pub fn thread_tenant_is_fixed_at_creation(store: &dyn Store) {
    let tenant_of = |id: &str| store.thread(id).unwrap().expect("thread").tenant;
    store.commit_step(StepCommit::new(thread("t").with_tenant("acme")).with_checkpoint(root("t", 0, b"s"))).unwrap();
    assert_eq!(tenant_of("t").as_deref(), Some("acme"));

    // A later commit without a tenant (the record a run rebuilds), and one naming another.
    store.commit_step(StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"a"]))).unwrap();
    assert_eq!(tenant_of("t").as_deref(), Some("acme"));
    let mut other = thread("t").with_tenant("globex");
    other.detail = "moved on".into();
    store.commit_step(StepCommit::new(other).with_checkpoint(step("t", 2, 1, &[b"b"]))).unwrap();
    let stored = store.thread("t").unwrap().expect("thread");
    assert_eq!((stored.tenant.as_deref(), stored.detail.as_str()), (Some("acme"), "moved on"));
    // A commit without a checkpoint changes the record alone: the tenant stays.
    store.commit_step(StepCommit::new(thread("t").with_tenant("initech"))).unwrap();
    assert_eq!(tenant_of("t").as_deref(), Some("acme"));

    // A thread created without a tenant keeps having none.
    store.commit_step(StepCommit::new(thread("n"))).unwrap();
    store.commit_step(StepCommit::new(thread("n").with_tenant("acme"))).unwrap();
    assert_eq!(tenant_of("n"), None);

    let listed: Vec<(String, Option<String>)> =
        store.list_threads().unwrap().into_iter().map(|t| (t.id, t.tenant)).collect();
    assert_eq!(listed, [("n".to_string(), None), ("t".to_string(), Some("acme".to_string()))]);
    assert_eq!(
        store.scan_threads().unwrap().items.iter().find(|t| t.id == "t").unwrap().tenant.as_deref(),
        Some("acme")
    );

    // A dump carries the tenant, and a restore writes it.
    let dump = store.dump_thread("t").unwrap().expect("dump");
    assert_eq!(dump.thread.tenant.as_deref(), Some("acme"));
    let mut restored = ThreadDump::new(thread("r").with_tenant("umbrella"));
    restored.checkpoints.push(root("r", 0, b"r"));
    store.restore_thread(restored).unwrap();
    assert_eq!(tenant_of("r").as_deref(), Some("umbrella"));
    store.commit_step(StepCommit::new(thread("r")).with_checkpoint(step("r", 1, 0, &[b"x"]))).unwrap();
    assert_eq!(tenant_of("r").as_deref(), Some("umbrella"));
}

/// A run enqueued for a tenant is listed and claimed with it; one enqueued without has none.
pub fn queued_run_keeps_its_tenant(store: &dyn Store) {
    store.enqueue_run(NewRun::new("a", "g", Some(b"{}".to_vec()), "alice", NOW).with_tenant("acme")).unwrap();
    store.enqueue_run(NewRun::new("b", "g", None, "bob", NOW + 1)).unwrap();
    let tenants = |runs: Vec<crate::QueuedRun>| -> Vec<(String, Option<String>)> {
        runs.into_iter().map(|r| (r.thread, r.tenant)).collect()
    };
    let expected = [("a".to_string(), Some("acme".to_string())), ("b".to_string(), None)];
    assert_eq!(tenants(store.list_runs().unwrap()), expected, "listed");
    assert_eq!(tenants(store.claim_runs("g", "w1", 1000, NOW + 10, 10).unwrap()), expected, "claimed");
    // The claim keeps it: listed again after it, and claimed again once the lease expired.
    assert_eq!(tenants(store.list_runs().unwrap()), expected, "listed after the claim");
    assert_eq!(tenants(store.claim_runs("g", "w2", 1000, NOW + 2000, 10).unwrap()), expected, "claimed again");
}
