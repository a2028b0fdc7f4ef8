//! The docs agree with the tree: every path a document names exists (outputs and outside projects' files named on
//! an allow-list, each with its reason), every fixture is listed in `fixtures/README.md` and every workload program
//! in `workloads/README.md`. The README's commands run in `convert/tests/readme_commands.rs` (they need the
//! binary). Issue 32: two docs named files that were never in the repository, and `workloads/README.md` listed 6
//! of its 14 CUDA programs.

use cutr_tests::doc_check::{Named, Tree, convert_commands, missing_paths, named_paths, unlisted};
use cutr_tests::repo;

/// The documents a newcomer reads.
const DOCS: &[&str] = &[
    "README.md",
    "docs/ANALYZE.md",
    "docs/ARCHITECTURE.md",
    "docs/BENCHMARKS.md",
    "docs/CI.md",
    "docs/FLEET.md",
    "docs/FORMAT.md",
    "docs/SOURCE_DIFF.md",
    "docs/TABLES.md",
    "docs/reference/conventions.md",
    "fixtures/README.md",
    "workloads/README.md",
    "workloads/cuda/EXPECTED.md",
    "tests/clients/README.md",
];

/// Paths documents name that are not in the tree on purpose: (document, path, why).
const NOT_IN_THE_TREE: &[(&str, &str, &str)] = &[
    ("README.md", "STEM.dumpN.cutr", "the name pattern of a ring dump, made at run time"),
    ("docs/reference/conventions.md", "trace_symbol_table.py", "HTA's source, read for the conventions"),
    ("docs/reference/conventions.md", "cuda_kernel_analysis.py", "HTA's source"),
    ("docs/reference/conventions.md", "common/builtin_clock.proto", "Perfetto's proto schema"),
    (
        "docs/reference/conventions.md",
        "src/trace_processor/importers/json/json_trace_tokenizer.cc",
        "Perfetto's trace processor source",
    ),
    ("tests/clients/README.md", "setup.py", "PySpark's sdist"),
    ("docs/TABLES.md", "../lib", "the folder beside an installed binary, not the repository's"),
];

fn read(doc: &str) -> String {
    std::fs::read_to_string(repo().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"))
}

#[test]
fn every_path_a_doc_names_exists() {
    let tree = Tree::of_repo(&repo());
    let mut missing = Vec::new();
    let mut allowed_used = vec![false; NOT_IN_THE_TREE.len()];
    for doc in DOCS {
        for Named { line, path } in missing_paths(doc, &read(doc), &tree) {
            match NOT_IN_THE_TREE.iter().position(|(d, p, _)| d == doc && *p == path) {
                Some(i) => allowed_used[i] = true,
                None => missing.push(format!("{doc}:{line}: `{path}`")),
            }
        }
    }
    assert!(missing.is_empty(), "paths the docs name that are not in the tree:\n{}", missing.join("\n"));
    let stale: Vec<_> = NOT_IN_THE_TREE.iter().zip(allowed_used).filter(|(_, used)| !used).map(|(a, _)| a).collect();
    assert!(stale.is_empty(), "allow-list entries no doc names any more (remove them): {stale:?}");
}

/// The check reads paths in every document (a change of the rules that stops reading one shows here), and reads
/// `docs/FORMAT.md`'s exactly.
#[test]
fn the_check_reads_the_paths_of_every_doc() {
    let tree = Tree::of_repo(&repo());
    for doc in DOCS {
        assert!(!named_paths(&read(doc), &tree).is_empty(), "{doc}: no path read");
    }
    let format: Vec<String> =
        named_paths(&read("docs/FORMAT.md"), &tree).into_iter().map(|n| format!("{}: {}", n.line, n.path)).collect();
    let expected = [
        "5: format/src/container.rs",
        "6: format/src/codec/mod.rs",
        "6: schema/cutr.fbs",
        "85: schema/tools/gen_layouts.py",
        "163: convert/tests/cli.rs",
        "163: recorder/tests/cli.rs",
        "167: fixtures/",
        "167: fixtures/README.md",
    ];
    assert_eq!(format, expected);
}

#[test]
fn every_fixture_is_listed_in_its_readme() {
    let tree = Tree::of_repo(&repo());
    let files: Vec<String> = tree.files_under("fixtures").into_iter().filter(|f| f != "README.md").collect();
    assert_eq!(files.len(), 62, "{files:?}");
    let unlisted = unlisted(&files, &read("fixtures/README.md"));
    assert!(unlisted.is_empty(), "fixtures/README.md does not list: {unlisted:?}");
}

#[test]
fn every_workload_program_is_listed_in_its_readme() {
    let tree = Tree::of_repo(&repo());
    let files: Vec<String> =
        tree.files_under("workloads").into_iter().filter(|f| f != "README.md" && !f.starts_with('.')).collect();
    let cuda = files.iter().filter(|f| f.starts_with("cuda/") && f.ends_with(".cu")).count();
    assert_eq!((files.len(), cuda), (27, 15), "{files:?}");
    let unlisted = unlisted(&files, &read("workloads/README.md"));
    assert!(unlisted.is_empty(), "workloads/README.md does not list: {unlisted:?}");
}

/// The checker itself on a small bad document: each kind of path it reads, found or missing.
#[test]
fn the_checker_names_each_missing_path_and_its_line() {
    let tree = Tree::from_files(
        [
            "fixtures/a.cutr",
            "fixtures/regress/base_a.cutr",
            "tools/test.sh",
            "recorder/src/ffi/os.rs",
            "docs/FORMAT.md",
        ]
        .map(String::from),
    );
    let doc = "\
# A doc

`fixtures/a.cutr` and `fixtures/gone.cutr`, `regress/base_{a,b}.cutr`, `ffi/os.rs` by its room, `fixtures/*.cutr`,
[the format](FORMAT.md), [gone](NOPE.md), ![a picture](images/none.png), [a site](https://example.com/x.md).
Not paths: `--start 5.3s`, `.cutr`, `samples/ms`, `forward/layer2/mlp`, `/usr/local/cuda`, `$OUT/x`.
`orphan.rs` is a bare name of ours; a span broken across a line is one span: `cupti-record
--pc-sampling`, then `fixtures/after.cutr`.

```sh
tools/test.sh && tools/nothing.sh --flag target/release/cupti-record   # fixtures/too_late.cutr
```
";
    let missing = missing_paths("docs/X.md", doc, &tree);
    let expect = [
        (3, "fixtures/gone.cutr"),
        (3, "regress/base_{a,b}.cutr"),
        (4, "NOPE.md"),
        (4, "images/none.png"),
        (6, "orphan.rs"),
        (7, "fixtures/after.cutr"),
        (10, "tools/nothing.sh"),
        (10, "fixtures/too_late.cutr"),
    ]
    .map(|(line, path)| Named { line, path: path.to_string() });
    assert_eq!(missing, expect);

    let files =
        ["a.cutr", "regress/base_a.cutr", "regress/base_b.cutr", "diff/aa-1.cutr", "cubins/x.cubin"].map(String::from);
    let listing = "`a.cutr`, `regress/base_{a,b}.cutr`, `diff/aa-*.cutr`";
    assert_eq!(unlisted(&files, listing), ["cubins/x.cubin"]);
}

/// The README's commands as `convert/tests/readme_commands.rs` reads them: from shell blocks only, split as a shell
/// splits them, comments (with their apostrophes) cut off; the three ways the README runs `cupti-convert`.
#[test]
fn convert_commands_are_read_as_a_shell_reads_them() {
    let doc = "\
```sh
# it's a comment line
cupti-convert stats a.cutr --step \"iter \"   # the runtime's own
target/release/cupti-convert info b.cutr
cargo run --release -p cutr-convert -- c.cutr --perfetto
cargo build -p cutr-convert
cupti-record -o run.cutr -- ./app
```

```yaml
cupti-convert d.cutr
```
";
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        convert_commands(doc),
        [
            (3, words(&["stats", "a.cutr", "--step", "iter "])),
            (4, words(&["info", "b.cutr"])),
            (5, words(&["c.cutr", "--perfetto"])),
        ]
    );
}

#[test]
#[should_panic(expected = "line 2: unbalanced quotes in `cupti-convert stats \"a.cutr`")]
fn an_unbalanced_quote_in_a_command_is_an_error() {
    convert_commands("```sh\ncupti-convert stats \"a.cutr\n```\n");
}
