//! Upstream account ids, checked once where they enter: every quota call
//! (permits, penalties, headers, peeks), concurrency leases and upstream
//! breaker keys go through [`parse_account`], so one rule holds everywhere.
//!
//! An account names a Redis key part (`{prefix}:rl:{<account>}:…`, where the
//! braces are the Cluster hash tag and `:` separates the parts), a row of the
//! Quotas page and a log field. So it is short, and every character in it is
//! one a person can see and tell apart: control characters (NUL, newlines)
//! would split log lines, format characters (zero-width, bidi overrides)
//! would make two different accounts look the same on a dashboard.

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

pub use crate::quota::stats::GLOBAL_ACCOUNT;

/// The longest account id, in bytes of UTF-8.
pub const MAX_ACCOUNT_BYTES: usize = 128;

/// The rule as users read it: in the API's error messages and its OpenAPI
/// description of `account`.
pub const ACCOUNT_RULE: &str = "an account is 1–128 bytes (UTF-8) of letters, digits, marks, \
     punctuation and symbols of any script: no spaces, no control or formatting characters \
     (NUL, tab, newlines, zero-width or bidi marks, unassigned code points), and none of \
     '{', '}' or ':'. Absent or empty means the shared `_global` bucket.";

/// Why an account id was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid account: {problem}; {ACCOUNT_RULE}")]
pub struct InvalidAccount {
    /// What is wrong with this one, e.g. "it contains U+000A".
    pub problem: String,
}

/// The account a call is for: `None` or `""` is [`GLOBAL_ACCOUNT`]; anything
/// else must follow [`ACCOUNT_RULE`].
pub fn parse_account(account: Option<&str>) -> Result<String, InvalidAccount> {
    let account = match account {
        None | Some("") => return Ok(GLOBAL_ACCOUNT.to_owned()),
        Some(a) => a,
    };
    if account.len() > MAX_ACCOUNT_BYTES {
        return Err(InvalidAccount { problem: format!("it is {} bytes long", account.len()) });
    }
    match account.chars().find(|c| !allowed(*c)) {
        Some(c) => Err(InvalidAccount { problem: format!("it contains {}", describe(c)) }),
        None => Ok(account.to_owned()),
    }
}

fn allowed(c: char) -> bool {
    if c.is_ascii() {
        // Visible ASCII: '!'..='~' (no space, no controls).
        return c.is_ascii_graphic() && !matches!(c, '{' | '}' | ':');
    }
    matches!(
        c.general_category_group(),
        GeneralCategoryGroup::Letter
            | GeneralCategoryGroup::Mark
            | GeneralCategoryGroup::Number
            | GeneralCategoryGroup::Punctuation
            | GeneralCategoryGroup::Symbol
    )
}

/// `'{'` for visible characters, `U+000A` for the rest (printing those
/// would be the problem all over again).
fn describe(c: char) -> String {
    if c.is_ascii_graphic() {
        format!("'{c}'")
    } else {
        format!("U+{:04X}", u32::from(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_ids_of_any_script_are_accepted() {
        for ok in ["acct42", "seller-1_a.b", "продавец-7", "卖家42", "a@b/c#d", "x".repeat(128).as_str()] {
            assert_eq!(parse_account(Some(ok)).as_deref(), Ok(ok), "{ok}");
        }
        assert_eq!(parse_account(None).as_deref(), Ok(GLOBAL_ACCOUNT));
        assert_eq!(parse_account(Some("")).as_deref(), Ok(GLOBAL_ACCOUNT));
    }

    #[test]
    fn control_format_and_separator_characters_are_refused_and_named() {
        let cases = [
            ("a\0b", "U+0000"),
            ("a\nb", "U+000A"),
            ("a\r", "U+000D"),
            ("\tab", "U+0009"),
            ("a b", "U+0020"),
            ("a\u{7f}", "U+007F"),
            ("a\u{85}b", "U+0085"),
            ("a\u{a0}b", "U+00A0"),
            ("a\u{200b}b", "U+200B"),
            ("a\u{202e}b", "U+202E"),
            ("a\u{2028}b", "U+2028"),
            ("a\u{feff}", "U+FEFF"),
            ("a\u{e000}", "U+E000"),
            ("a{b", "'{'"),
            ("a}b", "'}'"),
            ("a:b", "':'"),
        ];
        for (bad, named) in cases {
            let e = parse_account(Some(bad)).expect_err(bad);
            assert!(e.to_string().contains(named), "{bad:?}: {e}");
            assert!(!e.to_string().contains(bad), "the message must not echo the raw id: {e}");
        }
    }

    #[test]
    fn the_length_is_counted_in_bytes() {
        assert!(parse_account(Some(&"x".repeat(129))).is_err());
        // 64 two-byte letters are 128 bytes; 65 are too many.
        assert!(parse_account(Some(&"я".repeat(64))).is_ok());
        let e = parse_account(Some(&"я".repeat(65))).expect_err("130 bytes");
        assert!(e.to_string().contains("130 bytes"), "{e}");
    }
}
