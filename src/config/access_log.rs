//! `[access_log]`: whether the gateway writes one line per request (at
//! info level, in the log's format: text, or JSON with `--log-format
//! json`), and for which requests: every one (`mode = "on"`, the default
//! once the table is there), none (`"off"`, as when the table is absent),
//! or a share of them (`"sampled"`, `sample_rate_per_million`, in the
//! terms of `[tracing]`).

use toml::Spanned;

use super::bounds;
use super::complete::Completer;
use super::manifest as m;

/// Which requests get an access log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum AccessLog {
    #[default]
    Off,
    Every,
    /// About this many in a million requests.
    Sampled {
        per_million: u32,
    },
}

impl Completer<'_> {
    pub(super) fn access_log(&mut self, table: Option<m::AccessLog>) -> AccessLog {
        let Some(table) = table else {
            return AccessLog::Off;
        };
        let rate = |c: &mut Self, value: &Option<Spanned<i64>>| {
            let rate = c.count(
                value,
                "access_log.sample_rate_per_million",
                10_000,
                bounds::SAMPLE_RATE_PER_MILLION,
            );
            AccessLog::Sampled {
                per_million: u32::try_from(rate).unwrap_or(1_000_000),
            }
        };
        let mode = table.mode.as_ref().map(|mode| mode.get_ref().as_str());
        if mode != Some("sampled")
            && let Some(value) = &table.sample_rate_per_million
        {
            self.at(
                value,
                "access_log.sample_rate_per_million",
                "only applies with mode = \"sampled\"",
            );
        }
        match mode {
            None | Some("on") => AccessLog::Every,
            Some("off") => AccessLog::Off,
            Some("sampled") => rate(self, &table.sample_rate_per_million),
            Some(other) => {
                if let Some(mode) = &table.mode {
                    self.at(
                        mode,
                        "access_log.mode",
                        format!("{other:?} is not one of \"on\", \"off\", \"sampled\""),
                    );
                }
                AccessLog::Off
            }
        }
    }
}
