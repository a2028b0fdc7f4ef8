//! The progress bar on stderr while converting.

use std::sync::Arc;

use cutr_viewer_export::{Progress, Stage};

/// The progress bar on stderr while converting: a spinner while decoding and laying out, then a bar over the
/// shards written. Only on a terminal, and never with `--quiet`: piped or logged stderr gets no control characters.
pub struct ProgressBar(Option<indicatif::ProgressBar>);

impl ProgressBar {
    pub fn new(quiet: bool) -> Self {
        if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return ProgressBar(None);
        }
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(std::time::Duration::from_millis(100));
        ProgressBar(Some(b))
    }

    pub fn stage(&self, what: &str) {
        if let Some(b) = &self.0 {
            b.set_message(what.to_string());
        }
    }

    pub fn export_progress(&self) -> Option<Progress> {
        let b = self.0.clone()?;
        let style =
            indicatif::ProgressStyle::with_template("{spinner} writing [{bar:40}] {pos}/{len} shards, {elapsed}")
                .expect("a valid template")
                .progress_chars("=> ");
        Some(Progress(Arc::new(move |stage| match stage {
            Stage::Layout => b.set_message("laying out tracks"),
            Stage::Writing { done, total } => {
                if b.length() != Some(total) {
                    b.set_style(style.clone());
                    b.set_length(total);
                }
                b.set_position(done);
            }
        })))
    }

    /// Runs `f` (which prints to stderr) with the bar hidden, so the two do not garble each other.
    pub fn suspend(&self, f: impl FnOnce()) {
        match &self.0 {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    pub fn clear(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.clear();
    }
}
