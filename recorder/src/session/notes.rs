//! The one way a problem reaches the user: a note. Each distinct note is shown once on stderr as it happens
//! (unless `--quiet`), and every note goes into the file's loss report.

use std::sync::Mutex;

/// The most distinct notes kept: a note whose text keeps changing (a context id, a count) must not grow the
/// list over a run of hours. Past it, further notes are counted in one last note.
pub(crate) const MAX_NOTES: usize = 256;

/// The session's notes.
pub(crate) struct Notes {
    list: Mutex<Vec<String>>,
    /// Notes left out past [`MAX_NOTES`].
    left_out: std::sync::atomic::AtomicU64,
    quiet: bool,
}

impl Notes {
    pub(crate) fn new(quiet: bool) -> Notes {
        Notes { list: Mutex::new(Vec::new()), left_out: Default::default(), quiet }
    }

    /// Adds a note; the first of its text is shown on stderr, repeats are dropped.
    pub(crate) fn add(&self, msg: String) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if list.contains(&msg) {
            return;
        }
        if list.len() >= MAX_NOTES {
            self.left_out.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        if !self.quiet {
            eprintln!("cutr: {msg}");
        }
        list.push(msg);
    }

    /// Every note so far, oldest first (and how many more were left out, past [`MAX_NOTES`]).
    pub(crate) fn all(&self) -> Vec<String> {
        let mut all = self.list.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let left_out = self.left_out.load(std::sync::atomic::Ordering::Relaxed);
        if left_out > 0 {
            all.push(format!("{left_out} more notes of other texts left out (at most {MAX_NOTES} are kept)"));
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_kept_once_in_order() {
        let n = Notes::new(true);
        for m in ["b", "a", "b", "c", "a"] {
            n.add(m.into());
        }
        assert_eq!(n.all(), ["b", "a", "c"]);
    }

    /// A note whose text changes every time, for hours, keeps the list at its cap and is counted.
    #[test]
    fn notes_of_ever_new_texts_stop_at_the_cap_and_are_counted() {
        let n = Notes::new(true);
        for i in 0..100_000 {
            n.add(format!("context {i} went away"));
        }
        let all = n.all();
        assert_eq!(all.len(), MAX_NOTES + 1);
        assert_eq!(all[MAX_NOTES - 1], "context 255 went away");
        assert_eq!(all[MAX_NOTES], "99744 more notes of other texts left out (at most 256 are kept)");
    }
}
