//! The doc check's reader: which repository paths a Markdown document names, whether the tree has them, which
//! files of a folder a document lists, and the shell lines it shows. Markdown is read as CommonMark reads it
//! (`pulldown-cmark`), so a code span broken across lines or holding `\|` in a table is one span.
//!
//! What counts as a path (the rest of a document's code spans are code, flags or names):
//! - a link's or image's target that is not a URL or an anchor, relative to the document's folder;
//! - a code span with no spaces or shell syntax that either has a `/` and starts with the name of a folder in the
//!   tree (`fixtures/`, `cuda/` in `workloads/README.md`, `ffi/`) or ends in `.md`, or is a bare file name with
//!   one of our extensions (`config.rs`, `run.cutr`); `{a,b}` expands, `*` and `?` match as in a shell;
//! - in a fenced block, a word with a `/` whose first part is a top-level entry of the tree (`tools/test.sh`).
//!
//! A path exists when the tree has it from the root, from the document's folder, or as the end of a longer path
//! (`session/sources.rs` is `recorder/src/session/sources.rs`): a doc may name a file by its room.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// Extensions of our own files that a bare file name in a code span is checked by.
const OWN_EXTENSIONS: &[&str] = &["rs", "sh", "cu", "c", "py", "cutr", "json", "cjs", "fbs", "toml", "md"];

/// Characters no path of ours holds; a span with one is code, a URL or a placeholder (`$OUT`, `%p`, `<DIR>`).
const NOT_IN_PATHS: &[char] = &['$', '%', '<', '>', ':', '=', ';', '(', ')', '[', ']', '\'', '"', '|', '@', '\\', '#'];

/// The files and folders of the repository, as paths relative to its root with `/` separators.
pub struct Tree {
    entries: BTreeSet<String>,
    top_level: HashSet<String>,
    folder_names: HashSet<String>,
}

impl Tree {
    /// The files git tracks or would track (ignored build outputs are not part of the tree a doc may name).
    pub fn of_repo(root: &Path) -> Tree {
        let out = Command::new("git")
            .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
            .current_dir(root)
            .output()
            .expect("the doc check lists the tree with git");
        assert!(out.status.success(), "git ls-files failed: {}", String::from_utf8_lossy(&out.stderr));
        let listed = String::from_utf8(out.stdout).expect("UTF-8 file names");
        // A file deleted but not yet staged is still listed by --cached.
        Tree::from_files(listed.split('\0').filter(|f| !f.is_empty() && root.join(f).exists()).map(String::from))
    }

    pub fn from_files(files: impl IntoIterator<Item = String>) -> Tree {
        let mut tree = Tree { entries: BTreeSet::new(), top_level: HashSet::new(), folder_names: HashSet::new() };
        for file in files {
            let parts: Vec<&str> = file.split('/').collect();
            tree.top_level.insert(parts[0].to_string());
            for end in 1..parts.len() {
                tree.entries.insert(parts[..end].join("/"));
                tree.folder_names.insert(parts[end - 1].to_string());
            }
            tree.entries.insert(file);
        }
        tree
    }

    /// The files (not folders) under `folder`, relative to it.
    pub fn files_under(&self, folder: &str) -> Vec<String> {
        let prefix = format!("{folder}/");
        let folders: HashSet<&str> = self.entries.iter().filter_map(|e| e.rsplit_once('/').map(|p| p.0)).collect();
        self.entries
            .iter()
            .filter(|e| !folders.contains(e.as_str()))
            .filter_map(|e| e.strip_prefix(&prefix).map(String::from))
            .collect()
    }

    /// Whether `path` (one expansion, maybe a glob), named by a document in `doc_folder`, is in the tree.
    fn has(&self, doc_folder: &str, path: &str) -> bool {
        let path = path.trim_start_matches("./").trim_end_matches('/');
        let from_doc = normalize(&format!("{doc_folder}/{path}"));
        let suffix = format!("/{path}");
        self.entries.iter().any(|e| {
            if path.contains(['*', '?']) {
                glob_matches(path, e)
                    || from_doc.as_deref().is_some_and(|p| glob_matches(p, e))
                    || glob_matches(&format!("*{suffix}"), e)
            } else {
                e == path || from_doc.as_deref() == Some(e.as_str()) || e.ends_with(&suffix)
            }
        })
    }
}

/// `a/./b/../c` as `a/c`; None when it climbs out of the root.
fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// A shell-style wildcard match: `*` any run of characters (slashes too), `?` one character.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was and the text position it has swallowed up to: backtrack there on a mismatch.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `base_{a,b}.cutr` as `base_a.cutr`, `base_b.cutr` (one level of braces per group, groups in sequence).
pub fn expand_braces(s: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (s.find('{'), s.find('}')) else { return vec![s.to_string()] };
    if close < open {
        return vec![s.to_string()];
    }
    let (head, alternatives, tail) = (&s[..open], &s[open + 1..close], &s[close + 1..]);
    alternatives.split(',').flat_map(|alt| expand_braces(&format!("{head}{alt}{tail}"))).collect()
}

/// What a document holds that the check reads, each with its line (1-based).
#[derive(Default)]
pub struct Parts {
    /// Inline code spans.
    pub code_spans: Vec<(usize, String)>,
    /// Link and image targets.
    pub links: Vec<(usize, String)>,
    /// Lines of fenced code blocks, with the fence's language (`sh`, `yaml`, empty).
    pub fenced_lines: Vec<(usize, String, String)>,
}

/// Reads a Markdown document's code spans, links and fenced lines.
pub fn parts(markdown: &str) -> Parts {
    let line_of = |offset: usize| markdown[..offset].matches('\n').count() + 1;
    let mut parts = Parts::default();
    let mut fence: Option<String> = None;
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for (event, range) in Parser::new_ext(markdown, options).into_offset_iter() {
        match event {
            Event::Code(code) => parts.code_spans.push((line_of(range.start), code.to_string())),
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                parts.links.push((line_of(range.start), dest_url.to_string()))
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(lang))) => fence = Some(lang.to_string()),
            Event::Start(Tag::CodeBlock(CodeBlockKind::Indented)) => fence = Some(String::new()),
            Event::End(TagEnd::CodeBlock) => fence = None,
            Event::Text(text) if fence.is_some() => {
                let first = line_of(range.start);
                let lang = fence.clone().unwrap_or_default();
                for (i, line) in text.lines().enumerate() {
                    parts.fenced_lines.push((first + i, lang.clone(), line.to_string()));
                }
            }
            _ => {}
        }
    }
    parts
}

/// A path a document names, where.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Named {
    pub line: usize,
    pub path: String,
}

/// Whether a code span names a path (module docs: what counts).
fn span_is_path(span: &str, tree: &Tree) -> bool {
    if span.is_empty() || span.contains(char::is_whitespace) || span.contains(NOT_IN_PATHS) {
        return false;
    }
    // Flags and absolute paths (the system's, not ours).
    if span.starts_with(['-', '/', '~']) {
        return false;
    }
    if span.ends_with(".md") {
        return true;
    }
    match span.split_once('/') {
        Some((first, _)) => first == "." || first == ".." || tree.folder_names.contains(first),
        // A bare file name; `.cutr` alone is an extension.
        None => span.rsplit_once('.').is_some_and(|(stem, ext)| !stem.is_empty() && OWN_EXTENSIONS.contains(&ext)),
    }
}

/// A fenced block's word that names a path of the tree: its first part is a top-level entry.
fn fenced_word_path<'w>(word: &'w str, tree: &Tree) -> Option<&'w str> {
    let word = word.trim_matches(|c: char| "\"'`(),;".contains(c));
    let (first, _) = word.split_once('/')?;
    let plain = !word.contains(NOT_IN_PATHS) && !word.contains(['{', '}']);
    (plain && tree.top_level.contains(first)).then_some(word)
}

/// Every path the document `doc` (relative to the root) names, in order.
pub fn named_paths(markdown: &str, tree: &Tree) -> Vec<Named> {
    let parts = parts(markdown);
    let mut named = Vec::new();
    for (line, target) in &parts.links {
        if !target.contains("://") && !target.starts_with('#') && !target.starts_with("mailto:") {
            let path = target.split('#').next().unwrap_or_default();
            named.push(Named { line: *line, path: path.to_string() });
        }
    }
    for (line, span) in &parts.code_spans {
        if span_is_path(span, tree) {
            named.push(Named { line: *line, path: span.clone() });
        }
    }
    for (line, _, text) in &parts.fenced_lines {
        for word in text.split_whitespace() {
            if let Some(path) = fenced_word_path(word, tree) {
                named.push(Named { line: *line, path: path.to_string() });
            }
        }
    }
    named.sort_by_key(|n| n.line);
    named
}

/// The paths `doc` names that the tree does not have.
pub fn missing_paths(doc: &str, markdown: &str, tree: &Tree) -> Vec<Named> {
    let folder = doc.rsplit_once('/').map(|p| p.0).unwrap_or("");
    named_paths(markdown, tree)
        .into_iter()
        .filter(|n| expand_braces(&n.path).iter().any(|p| !tree.has(folder, p)))
        .collect()
}

/// The files of `folder` (relative to it) that no code span of its document names, by path relative to the
/// folder (braces expanded, globs matched).
pub fn unlisted(files: &[String], markdown: &str) -> Vec<String> {
    let listed: Vec<String> = parts(markdown).code_spans.iter().flat_map(|(_, span)| expand_braces(span)).collect();
    files
        .iter()
        .filter(|f| !listed.iter().any(|l| l == *f || (l.contains(['*', '?']) && glob_matches(l, f))))
        .cloned()
        .collect()
}

/// The lines of a document's shell blocks (```sh, ```bash, ```console), with their line numbers.
pub fn shell_lines(markdown: &str) -> Vec<(usize, String)> {
    parts(markdown)
        .fenced_lines
        .into_iter()
        .filter(|(_, lang, _)| matches!(lang.as_str(), "sh" | "bash" | "console" | "shell"))
        .map(|(line, _, text)| (line, text))
        .collect()
}

/// The `cupti-convert` commands of a document's shell lines, as argument lists: `cupti-convert ARGS`,
/// `DIR/cupti-convert ARGS` and `cargo run ... -p cutr-convert -- ARGS`. Words are split as a shell splits them
/// (quotes kept together) once the comment is cut off (from a `#` after a space: comments hold apostrophes). A line
/// the shell could not split is an error naming it, never a command silently left out.
pub fn convert_commands(markdown: &str) -> Vec<(usize, Vec<String>)> {
    let mut commands = Vec::new();
    for (line, text) in shell_lines(markdown) {
        if text.trim_start().starts_with('#') {
            continue;
        }
        let code = text.find(" #").map_or(text.as_str(), |comment| &text[..comment]);
        let words = shlex::split(code).unwrap_or_else(|| panic!("line {line}: unbalanced quotes in `{code}`"));
        let Some(program) = words.first() else { continue };
        let args = if program == "cupti-convert" || program.ends_with("/cupti-convert") {
            &words[1..]
        } else if program == "cargo" && words.iter().any(|w| w == "cutr-convert") {
            match words.iter().position(|w| w == "--") {
                Some(dashes) => &words[dashes + 1..],
                None => continue,
            }
        } else {
            continue;
        };
        commands.push((line, args.to_vec()));
    }
    commands
}
