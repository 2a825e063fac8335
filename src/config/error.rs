//! What is wrong with a manifest, and where: every problem carries the file,
//! line and column of the value it is about, so `wasmgate check`, start-up and
//! a reload all report the same list in the same words.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// One problem found in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Option<Location>,
    /// The dotted key the problem is about (`servers[0].routes[1].upstream`).
    pub key: String,
    pub message: String,
}

/// A 1-based line and column in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl Location {
    /// The line and column of a byte offset into `source`.
    pub fn of_offset(source: &str, offset: usize) -> Location {
        let before = source.get(..offset.min(source.len())).unwrap_or(source);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location { line, column }
    }

    pub fn of_span(source: &str, span: &Range<usize>) -> Location {
        Location::of_offset(source, span.start)
    }
}

/// Why a manifest could not be turned into a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read the manifest: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", render(path, problems))]
    Invalid { path: PathBuf, problems: Vec<Problem> },
}

impl ConfigError {
    /// The problems found, empty when the file could not be read at all.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { problems, .. } => problems,
        }
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
        assert_eq!(Location::of_offset(source, 0), Location { line: 1, column: 1 });
        let offset = source.find('=').map(|_| source.rfind('=').unwrap_or(0)).unwrap_or(0);
        assert_eq!(Location::of_offset(source, offset), Location { line: 2, column: 4 });
        assert_eq!(Location::of_offset(source, 10_000).line, 3);
    }
}
