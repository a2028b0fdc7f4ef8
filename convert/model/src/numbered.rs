//! Numbered names: NVTX ranges that carry a counter in their text (`ProfilerStep#1234`, `step 17`, `iter_9`). A
//! day of training names millions of steps one by one; a summary that gives each its own row grows with the
//! recording, not with what the user asked. Summaries list a family's members one by one up to
//! [`FAMILY_ROWS_CAP`] of them and fold the family into one row (`ProfilerStep#<n>`) past it.
//!
//! ```
//! use cutr_model::numbered::{family_label, split_number};
//!
//! assert_eq!(split_number("ProfilerStep#1234"), Some(("ProfilerStep#", 1234)));
//! assert_eq!(split_number("step 17"), Some(("step ", 17)));
//! assert_eq!(split_number("forward"), None);
//! assert_eq!(split_number("layer2.conv"), None);
//! assert_eq!(family_label("ProfilerStep#"), "ProfilerStep#<n>");
//! ```

/// Members of one family listed one by one; past this many distinct numbers, the family is one row.
pub const FAMILY_ROWS_CAP: usize = 64;

/// A name that ends in a decimal number after a non-digit: its prefix (the family) and the number. A name that is
/// only digits, or whose number does not fit in 64 bits, is no family's member.
pub fn split_number(name: &str) -> Option<(&str, u64)> {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits == name.len() {
        return None;
    }
    let (prefix, number) = name.split_at(name.len() - digits);
    Some((prefix, number.parse().ok()?))
}

/// The row name of a folded family.
pub fn family_label(prefix: &str) -> String {
    format!("{prefix}<n>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_trailing_numbers_after_text_make_a_family() {
        assert_eq!(split_number("iter_9"), Some(("iter_", 9)));
        assert_eq!(split_number("1234"), None);
        assert_eq!(split_number(""), None);
        assert_eq!(split_number("a99999999999999999999999"), None);
        assert_eq!(split_number("sm_90a"), None);
    }
}
