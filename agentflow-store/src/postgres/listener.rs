//! The one `LISTEN` connection of a [`PostgresStore`](super::PostgresStore), started by the
//! first [`Store::on_events`](crate::Store::on_events): it listens on the schema's channel (see
//! [`channel`](crate::postgres::event_log::channel)), which every process's step commits with
//! events notify, and calls every registered wake with the thread each notification names.
//!
//! It runs on the store's I/O thread, beside the pool (not one of its connections). When the
//! connection drops it connects again, waiting 100 ms, then twice as long after each failure,
//! up to 5 s; notifications sent meanwhile are lost, which is why readers also poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::{Either, select};
use tokio_postgres::{AsyncMessage, NoTls};

use crate::event_wakes::EventWakes;
use crate::postgres::io::IoThread;
use crate::record::EventWake;

/// The pause before the first reconnection, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// How long the first [`EventListener::add`] waits for the connection to listen, beyond the
/// connect timeout.
const SETUP_MARGIN: Duration = Duration::from_secs(1);

/// The wakes of a store and its listening connection, started once.
pub(crate) struct EventListener {
    config: tokio_postgres::Config,
    channel: String,
    wakes: Arc<EventWakes>,
    started: AtomicBool,
}

impl EventListener {
    /// A listener (not started) for `channel`, connecting with `config` (the pool's settings:
    /// its server options, its connect timeout), with TCP keepalives every 30 s, so a connection
    /// whose server vanished is noticed.
    pub(crate) fn new(mut config: tokio_postgres::Config, channel: String) -> Self {
        config.keepalives(true).keepalives_idle(Duration::from_secs(30)).keepalives_interval(Duration::from_secs(10));
        EventListener { config, channel, wakes: Arc::new(EventWakes::default()), started: AtomicBool::new(false) }
    }

    /// Registers `wake`. The first call starts the listening connection on `io` and waits until
    /// it listens, or its first attempt failed (at most the connect timeout and a second), so
    /// the commits made after it returns are heard when the server is up.
    pub(crate) fn add(&self, io: &IoThread, wake: EventWake) {
        self.wakes.add(wake);
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (ready, set_up) = sync_channel(1);
        io.spawn(listen(self.config.clone(), self.channel.clone(), Arc::clone(&self.wakes), ready));
        let wait = self.config.get_connect_timeout().copied().unwrap_or(Duration::from_secs(10)) + SETUP_MARGIN;
        let _ = set_up.recv_timeout(wait);
    }
}

/// Listens on `channel` until the store's I/O thread stops, connecting again whenever the
/// connection drops; says on `ready` when the first attempt listens or failed.
async fn listen(config: tokio_postgres::Config, channel: String, wakes: Arc<EventWakes>, ready: SyncSender<()>) {
    let mut ready = Some(ready);
    let mut pause = FIRST_PAUSE;
    let statement = format!("LISTEN \"{channel}\"");
    loop {
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let mut messages = std::pin::pin!(futures_util::stream::poll_fn(move |cx| connection.poll_message(cx)));
            let listens = {
                let mut listening = std::pin::pin!(client.batch_execute(&statement));
                // The connection is driven (its messages read) while `LISTEN` waits for its answer.
                loop {
                    match select(listening.as_mut(), messages.next()).await {
                        Either::Left((answer, _)) => break answer.is_ok(),
                        Either::Right((Some(Ok(AsyncMessage::Notification(n))), _)) => wakes.wake(n.payload()),
                        Either::Right((Some(Ok(_)), _)) => {}
                        Either::Right((Some(Err(_)) | None, _)) => break false,
                    }
                }
            };
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            if listens {
                pause = FIRST_PAUSE;
                // Until the connection ends (`client` lives as long).
                while let Some(Ok(message)) = messages.next().await {
                    if let AsyncMessage::Notification(n) = message {
                        wakes.wake(n.payload());
                    }
                }
            }
        } else if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
