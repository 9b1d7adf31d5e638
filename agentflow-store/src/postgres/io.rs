//! The I/O thread of a [`PostgresStore`](super::PostgresStore): a small tokio runtime of its own
//! on a dedicated thread, which owns every connection.
//!
//! The [`Store`](crate::Store) trait is blocking and is called from anywhere: plain threads,
//! `spawn_blocking`, and also directly on an async worker thread (the executor releases its
//! lease from a `Drop`). A client that blocks on a runtime of its own (the sync `postgres`
//! crate) panics when called inside another runtime's context, so the store never blocks on a
//! runtime: a call spawns its future on this thread's runtime and waits on a plain channel for
//! the answer, which is legal in every context.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::mpsc::sync_channel;
use std::thread::{JoinHandle, ThreadId};

use futures_util::FutureExt;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::error::StorageError;

/// A runtime on a thread of its own, stopped when dropped.
pub(crate) struct IoThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<()>>,
    thread: ThreadId,
    path: PathBuf,
}

impl IoThread {
    /// Starts the thread. `path` names the store in errors.
    pub(crate) fn start(path: PathBuf) -> Result<Self, StorageError> {
        let failed = |detail: String| StorageError::Closed { path: path.clone(), detail };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| failed(format!("cannot start the I/O runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let join = std::thread::Builder::new()
            .name("agentflow-postgres".to_string())
            .spawn(move || {
                // Spawned tasks run while this thread waits for the stop signal (or for the
                // store to be dropped, which drops the sender).
                let _ = runtime.block_on(stopped);
                runtime.shutdown_background();
            })
            .map_err(|e| failed(format!("cannot start the I/O thread: {e}")))?;
        let thread = join.thread().id();
        Ok(IoThread { handle, stop: Some(stop), join: Some(join), thread, path })
    }

    /// Runs `fut` on the I/O thread and blocks the caller until it is done. Legal inside an
    /// async context (it blocks that worker thread for the duration, like any blocking call).
    pub(crate) fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, StorageError> {
        let (tx, rx) = sync_channel(1);
        self.handle.spawn(async move {
            // A panic of the call (a bug) is its answer; the thread and its other calls go on.
            let answer = AssertUnwindSafe(fut).catch_unwind().await;
            // The caller may have gone away; nothing to do then.
            let _ = tx.send(answer);
        });
        match rx.recv() {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(panic)) => Err(StorageError::Backend {
                path: self.path.clone(),
                detail: format!(
                    "the call panicked on the store's I/O thread ({}); the call stopped there: please report it as a bug",
                    panic_message(&*panic)
                ),
            }),
            Err(_) => Err(self.closed()),
        }
    }

    /// Runs `fut` on the I/O thread without waiting; it answers by itself (a panic of it, a bug,
    /// ends it there, and the thread and its other calls go on).
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(async move {
            let _ = AssertUnwindSafe(fut).catch_unwind().await;
        });
    }

    fn closed(&self) -> StorageError {
        StorageError::Closed {
            path: self.path.clone(),
            detail: "the store's I/O thread stopped before answering".to_string(),
        }
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

impl Drop for IoThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Dropped from a callback running on the I/O thread itself: it ends on its own.
        if std::thread::current().id() != self.thread
            && let Some(join) = self.join.take()
        {
            let _ = join.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_panics_answers_with_an_error_and_the_thread_goes_on() {
        let io = IoThread::start(PathBuf::from("test-store")).unwrap();
        let failed = io.run::<()>(async { panic!("boom") }).unwrap_err();
        assert!(
            matches!(&failed, StorageError::Backend { detail, .. } if detail.contains("panicked") && detail.contains("boom")),
            "{failed:?}"
        );
        assert_eq!(io.run(async { 7 }).unwrap(), 7);
        // A call that answers by itself and panics ends there too.
        io.spawn(async { panic!("boom") });
        assert_eq!(io.run(async { 8 }).unwrap(), 8);
    }
}
