//! When a live view stops: Ctrl-C (SIGINT), SIGTERM, a hang-up (SIGHUP: the terminal or
//! ssh session it ran in went away), or its `--duration` running out. Each ends it the
//! same way: what the kernel wrote is read, the closing summary said, a demo's lab removed.
use std::{pin::Pin, time::Duration};

use anyhow::{Context as _, Result};
use tokio::{
    signal::unix::{signal, Signal, SignalKind},
    time::Sleep,
};

pub struct Stop {
    deadline: Option<Pin<Box<Sleep>>>,
    // Registered once, so a signal that arrives while events are being written is kept.
    sigint: Signal,
    sigterm: Signal,
    sighup: Signal,
}

impl Stop {
    /// `duration`: stop by itself after this long; None = only on a signal.
    pub fn new(duration: Option<Duration>) -> Result<Stop> {
        Ok(Stop {
            deadline: duration.map(|d| Box::pin(tokio::time::sleep(d))),
            sigint: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            sigterm: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            sighup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }

    /// Stop by itself `duration` from now, instead of the deadline given to [`Stop::new`]:
    /// for a stop made before its view starts, so that no signal in between is missed.
    pub fn stop_after(&mut self, duration: Duration) {
        self.deadline = Some(Box::pin(tokio::time::sleep(duration)));
    }

    /// Resolves once one of the stop conditions happens.
    pub async fn requested(&mut self) {
        let deadline = async {
            match self.deadline.as_mut() {
                Some(d) => d.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.sigint.recv() => {}
            _ = self.sigterm.recv() => {}
            _ = self.sighup.recv() => {}
            _ = deadline => {}
        }
    }
}
