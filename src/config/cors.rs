//! `[cors]`: the allowed origins, compiled to anchored regular expressions
//! (kube's `--cors-allowed-origins`).

use regex::Regex;
use toml::Spanned;

use super::complete::Completer;

impl Completer<'_> {
    pub(super) fn cors(&mut self, origins: &[Spanned<String>]) -> Vec<Regex> {
        let mut compiled = Vec::new();
        for origin in origins {
            let pattern = origin.get_ref();
            // kube refuses unanchored patterns: "example.com" would also allow
            // "example.com.attacker.io".
            let anchored_start = pattern.starts_with('^') || pattern.starts_with("//");
            let anchored_end = pattern.ends_with('$') || pattern.ends_with("(:|$)");
            if !anchored_start || !anchored_end {
                self.at(
                    origin,
                    "cors.allowed_origins",
                    format!(
                        "{pattern:?} must be anchored: start with ^ or // and end with $ or (:|$)"
                    ),
                );
                continue;
            }
            match Regex::new(pattern) {
                Ok(regex) => compiled.push(regex),
                Err(error) => self.at(
                    origin,
                    "cors.allowed_origins",
                    format!("not a valid regular expression: {}", one_line(&error)),
                ),
            }
        }
        compiled
    }
}

/// A regex syntax error on one line: its last line (`unclosed group`),
/// without the pattern drawn above it.
fn one_line(error: &regex::Error) -> String {
    let text = error.to_string();
    let last = text.lines().last().unwrap_or_default();
    last.strip_prefix("error: ").unwrap_or(last).to_owned()
}
