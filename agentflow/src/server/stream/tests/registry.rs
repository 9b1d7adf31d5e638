//! The registry of waiting readers, and the count of open streams.

use std::sync::Arc;

use crate::server::stream::limit::OpenStreams;
use crate::server::stream::registry::Wakes;

#[tokio::test]
async fn the_registry_wakes_the_readers_of_a_thread_only() {
    let wakes = Wakes::default();
    let (a, b) = (wakes.watch("a"), wakes.watch("b"));
    assert!(Arc::ptr_eq(&a, &wakes.watch("a")), "one entry per thread");
    {
        let (woken_a, woken_b) = (a.notified(), b.notified());
        tokio::pin!(woken_a, woken_b);
        woken_a.as_mut().enable();
        woken_b.as_mut().enable();
        wakes.wake("a");
        wakes.wake("nobody");
        woken_a.await;
        assert!(futures_util::FutureExt::now_or_never(woken_b.as_mut()).is_none());
    }
    drop((a, b));
    wakes.wake("a");
    assert_eq!(wakes.len(), 1, "a thread no reader watches is dropped when woken");
}

#[test]
fn a_user_holds_at_most_the_limit_of_open_streams() {
    let open = Arc::new(OpenStreams::new(2));
    let first = open.open("alice").unwrap();
    let second = open.open("alice").unwrap();
    assert!(open.open("alice").is_none());
    let other = open.open("bob");
    assert!(other.is_some(), "another user's streams are counted apart");
    drop(first);
    let third = open.open("alice");
    assert!(third.is_some(), "a closed stream frees its place");
    drop((second, third, other));
    assert_eq!((open.of("alice"), open.of("bob")), (0, 0));
}
