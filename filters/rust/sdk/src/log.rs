//! Lines for the gateway's log: [`debug!`](crate::debug), [`info!`](crate::info),
//! [`warn!`](crate::warn) and [`error!`](crate::error) ask the host's
//! `log-enabled` first, so a line the gateway's log would drop costs one host
//! call and no formatting.

use crate::host;
use crate::types::LogLevel;

/// Writes the line `message` makes at `level`, when the gateway's log keeps
/// that level.
pub fn write(level: LogLevel, message: impl FnOnce() -> String) {
    if host::log_enabled(level) {
        host::log(level, &message());
    }
}

/// Logs a `format!`-style line at `debug`, formatted only when kept.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => {
        $crate::__log($crate::types::LogLevel::Debug, || ::std::format!($($arg)+))
    };
}

/// Logs a `format!`-style line at `info`, formatted only when kept.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => {
        $crate::__log($crate::types::LogLevel::Info, || ::std::format!($($arg)+))
    };
}

/// Logs a `format!`-style line at `warn`, formatted only when kept.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => {
        $crate::__log($crate::types::LogLevel::Warn, || ::std::format!($($arg)+))
    };
}

/// Logs a `format!`-style line at `error`, formatted only when kept.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => {
        $crate::__log($crate::types::LogLevel::Error, || ::std::format!($($arg)+))
    };
}
