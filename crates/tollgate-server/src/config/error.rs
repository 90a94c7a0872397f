//! A refusal of a config file that a person can act on: `file:line:column: field: message`.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Why a config file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as it was named.
    pub file: PathBuf,
    /// Where in it, 1-based; `None` when the file could not be read at all.
    pub at: Option<(usize, usize)>,
    /// The field, dotted (`policies.api.capacity`); empty for a syntax error.
    pub field: String,
    /// What is wrong, and what is expected.
    pub message: String,
}

impl ConfigError {
    /// An error at byte offsets `span` of `text`.
    pub(crate) fn at(
        file: &Path,
        text: &str,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            at: Some(span.map_or((1, 1), |span| line_and_column(text, span.start))),
            field: field.into(),
            message: message.into(),
        }
    }

    /// The file could not be read.
    pub(crate) fn unreadable(file: &Path, error: &std::io::Error) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            at: None,
            field: String::new(),
            message: format!("cannot read the config file: {error}"),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, column)) = self.at {
            write!(f, ":{line}:{column}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub(crate) fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    // A span may start inside a character only if the parser is wrong; count up to it anyway.
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_count_from_one_in_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 6), (2, 1));
        assert_eq!(line_and_column(text, 10), (2, 4));
        assert_eq!(line_and_column(text, 99), (3, 1));
    }

    #[test]
    fn displays_as_compilers_do() {
        let e = ConfigError::at(
            Path::new("tollgate.toml"),
            "x\n[policies.api]\ncapacity = 0\n",
            Some(28..29),
            "policies.api.capacity",
            "must be at least 1, got 0",
        );
        assert_eq!(
            e.to_string(),
            "tollgate.toml:3:12: policies.api.capacity: must be at least 1, got 0"
        );
    }
}
