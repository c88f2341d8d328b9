//! Progress on stderr, phase by phase: an `indicatif` bar on a terminal,
//! plain lines otherwise.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Plain progress lines at most this often per phase.
const PLAIN_PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Progress of one phase on stderr: an `indicatif` bar (or spinner, when
/// the total is unknown) on a terminal; otherwise a plain line at most every
/// [`PLAIN_PROGRESS_INTERVAL`].
pub(super) struct Phase {
    bar: Option<ProgressBar>,
    last_line: Mutex<Instant>,
}

impl Phase {
    pub(super) fn start(tty: bool, total: Option<u64>, label: &'static str) -> Self {
        let bar = tty.then(|| {
            let (bar, template) = match total {
                Some(total) => (
                    ProgressBar::new(total),
                    "{msg} [{wide_bar}] {pos}/{len} {elapsed}",
                ),
                None => (ProgressBar::new_spinner(), "{spinner} {msg} {elapsed}"),
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.set_message(label);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            bar,
            last_line: Mutex::new(Instant::now()),
        }
    }

    /// Progress at `position`; `message` is built only when shown.
    pub(super) fn update(&self, position: u64, message: impl FnOnce() -> String) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(position);
                bar.set_message(message());
            }
            None => {
                let Ok(mut last) = self.last_line.lock() else {
                    return;
                };
                if last.elapsed() >= PLAIN_PROGRESS_INTERVAL {
                    *last = Instant::now();
                    eprintln!("{}", message());
                }
            }
        }
    }

    /// A line that is always shown.
    pub(super) fn line(&self, text: String) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// Ends the phase, then shows `text`.
    pub(super) fn finish(self, text: Option<String>) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if let Some(text) = text {
            eprintln!("{text}");
        }
    }
}
