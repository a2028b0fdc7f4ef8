//! The shape of the options table (`options.rs`): a `CUTR_*` variable with its flag, help, parser and formatter.

use super::Config;

/// One `CUTR_*` variable of the table, with its flag.
#[derive(Clone, Copy, Debug)]
pub struct Opt {
    /// The `Config` field it sets. `capture`, `pc_sampling` and `counters` take several variables each.
    pub field: &'static str,
    pub var: &'static str,
    /// The flag's help; for a variable without a flag, what it takes.
    pub help: &'static str,
    /// The `cupti-record` flag that sets the variable; `None` for those only the environment or the Rust API set.
    pub flag: Option<Flag>,
    /// Reads the variable's text into the field. Variables are read in the table's order, so one that refines
    /// another's field (`CUTR_CAPTURE_RANGE_END`) comes after it, and is ignored where that one left it off.
    pub parse: fn(&mut Config, &str) -> Result<(), String>,
    /// The variable's text for a configuration (what `parse` reads back); `None` leaves the variable unset.
    pub format: fn(&Config) -> Option<String>,
    /// Whether the file's metadata (`Config::describe`) holds it: not for what changes no recorded byte.
    pub recorded: bool,
}

/// A `cupti-record` flag. Its value is the variable's text, so the launcher and the environment share `parse`.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    pub long: &'static str,
    pub short: Option<char>,
    pub takes: Takes,
    /// The default `--help` shows. Shown only: a flag not given leaves `Config::default()`, which a test checks
    /// this agrees with.
    pub default: Option<&'static str>,
    /// Another flag (its long name) without which this one means nothing.
    pub requires: Option<&'static str>,
    /// Another switch (its long name) that this one turns on too.
    pub implies: Option<&'static str>,
}

/// What a flag takes on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// `--flag VALUE`; the text names VALUE in the help.
    Value(&'static str),
    /// `--flag [VALUE]` (VALUE named by the first text); without VALUE the variable gets the second.
    OptionalValue(&'static str, &'static str),
    /// `--flag`, which gives the variable this text.
    Switch(&'static str),
}

impl Opt {
    pub(super) const fn new(
        var: &'static str,
        help: &'static str,
        parse: fn(&mut Config, &str) -> Result<(), String>,
        format: fn(&Config) -> Option<String>,
    ) -> Opt {
        Opt { field: "", var, help, flag: None, parse, format, recorded: true }
    }

    pub(super) const fn flag(self, flag: Flag) -> Opt {
        Opt { flag: Some(flag), ..self }
    }

    pub(super) const fn unrecorded(self) -> Opt {
        Opt { recorded: false, ..self }
    }

    /// Set by `options!`, which knows the field's name.
    pub(super) const fn of_field(self, field: &'static str) -> Opt {
        Opt { field, ..self }
    }
}

impl Flag {
    pub(super) const fn new(long: &'static str, takes: Takes) -> Flag {
        Flag { long, short: None, takes, default: None, requires: None, implies: None }
    }

    pub(super) const fn value(long: &'static str, value_name: &'static str) -> Flag {
        Flag::new(long, Takes::Value(value_name))
    }

    pub(super) const fn switch(long: &'static str, sets: &'static str) -> Flag {
        Flag::new(long, Takes::Switch(sets))
    }

    pub(super) const fn short(self, short: char) -> Flag {
        Flag { short: Some(short), ..self }
    }

    pub(super) const fn default(self, default: &'static str) -> Flag {
        Flag { default: Some(default), ..self }
    }

    pub(super) const fn requires(self, long: &'static str) -> Flag {
        Flag { requires: Some(long), ..self }
    }

    pub(super) const fn implies(self, long: &'static str) -> Flag {
        Flag { implies: Some(long), ..self }
    }
}
