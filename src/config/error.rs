//! What is wrong with a manifest, and where: every problem carries the file,
//! line and column of the value it is about, so `wasmgate check`, start-up and
//! a reload all report the same list in the same words.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// One problem found in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where in the manifest, when the problem has a place.
    pub location: Option<Location>,
    /// The dotted key the problem is about (`servers[0].routes[1].upstream`).
    pub key: String,
    /// What is wrong, in the words the user reads.
    pub message: String,
}

/// A 1-based line and column in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

impl Location {
    /// The line and column of a byte offset into `source`.
    pub(crate) fn of_offset(source: &str, offset: usize) -> Location {
        let before = source.get(..offset.min(source.len())).unwrap_or(source);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location { line, column }
    }

    pub(crate) fn of_span(source: &str, span: &Range<usize>) -> Location {
        Location::of_offset(source, span.start)
    }
}

/// Why a manifest could not be turned into a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The manifest could not be read.
    #[error("{}: cannot read the manifest: {source}", path.display())]
    Read {
        /// The manifest's path.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The manifest was read but is not a valid configuration.
    #[error("{}", render(path, problems))]
    Invalid {
        /// The manifest's path.
        path: PathBuf,
        /// Every problem found, in the order of the manifest.
        problems: Vec<Problem>,
    },
}

/// The dotted key (`limits.max_requests_in_flight`, `servers[1].routes[0].path`)
/// whose key or value holds byte `offset` of `source`, the innermost one;
/// empty when none does or the text does not parse. It names the key of a
/// problem found while reading the manifest (a wrong type, an unknown
/// field), whose error knows only its place.
pub(crate) fn key_at(source: &str, offset: usize) -> String {
    let Ok(root) = toml::de::DeTable::parse(source) else {
        return String::new();
    };
    let mut found = None;
    key_in_table(root.get_ref(), offset, "", &mut found);
    found.unwrap_or_default()
}

fn key_in_table(
    table: &toml::de::DeTable<'_>,
    offset: usize,
    prefix: &str,
    found: &mut Option<String>,
) {
    for (key, value) in table {
        let dotted = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        key_in_value(value, key.span().contains(&offset), offset, dotted, found);
    }
}

fn key_in_value(
    value: &toml::Spanned<toml::de::DeValue<'_>>,
    key_holds_offset: bool,
    offset: usize,
    dotted: String,
    found: &mut Option<String>,
) {
    if key_holds_offset || value.span().contains(&offset) {
        *found = Some(dotted.clone());
    }
    match value.get_ref() {
        toml::de::DeValue::Table(table) => key_in_table(table, offset, &dotted, found),
        toml::de::DeValue::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                key_in_value(item, false, offset, format!("{dotted}[{index}]"), found);
            }
        }
        _ => {}
    }
}

fn render(path: &std::path::Path, problems: &[Problem]) -> String {
    let lines: Vec<String> = problems
        .iter()
        .map(|problem| format!("{}", ProblemAt { path, problem }))
        .collect();
    lines.join("\n")
}

struct ProblemAt<'a> {
    path: &'a std::path::Path,
    problem: &'a Problem,
}

impl fmt::Display for ProblemAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(Location { line, column }) = self.problem.location {
            write!(f, ":{line}:{column}")?;
        }
        if self.problem.key.is_empty() {
            write!(f, ": {}", self.problem.message)
        } else {
            write!(f, ": {}: {}", self.problem.key, self.problem.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_one_based_and_count_characters() {
        let source = "a = 1\nbé = 2\n";
        assert_eq!(
            Location::of_offset(source, 0),
            Location { line: 1, column: 1 }
        );
        let offset = source
            .find('=')
            .map(|_| source.rfind('=').unwrap_or(0))
            .unwrap_or(0);
        assert_eq!(
            Location::of_offset(source, offset),
            Location { line: 2, column: 4 }
        );
        assert_eq!(Location::of_offset(source, 10_000).line, 3);
    }
}
