//! The one way a problem reaches the user: a note. Each distinct note is shown once on stderr as it happens
//! (unless `--quiet`), and every note goes into the file's loss report.

use std::sync::Mutex;

/// The session's notes.
pub(crate) struct Notes {
    list: Mutex<Vec<String>>,
    quiet: bool,
}

impl Notes {
    pub(crate) fn new(quiet: bool) -> Notes {
        Notes { list: Mutex::new(Vec::new()), quiet }
    }

    /// Adds a note; the first of its text is shown on stderr, repeats are dropped.
    pub(crate) fn add(&self, msg: String) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if list.contains(&msg) {
            return;
        }
        if !self.quiet {
            eprintln!("cutr: {msg}");
        }
        list.push(msg);
    }

    /// Every note so far, oldest first.
    pub(crate) fn all(&self) -> Vec<String> {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
}
