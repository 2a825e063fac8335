//! The filter's config: the manifest's `config` table, which the host hands
//! over as JSON (`host.config`), parsed once per instance into the filter's
//! own type. A pooled instance serves many calls, all with the same config
//! (a reload makes new instances), so every call but the first costs only a
//! look-up.

use std::any::{Any, type_name};
use std::sync::OnceLock;

use serde::de::DeserializeOwned;

use crate::host;

/// A filter's config type: what its `config` table deserializes into, and
/// what serde cannot check.
///
/// Every error reads `<FILTER>: bad config: <why>`: JSON that does not parse,
/// a config that is not a JSON object (serde would take an array for a
/// struct), what serde rejects (a missing or unknown key with
/// `#[serde(deny_unknown_fields)]`, a wrong type) and what [`check`] says.
/// A config completed from another shape derives `Deserialize` with
/// `#[serde(try_from = "Raw")]`: the conversion's error is a reason too.
///
/// [`check`]: FilterConfig::check
pub trait FilterConfig: DeserializeOwned + Send + Sync + 'static {
    /// The filter's name, which begins every error of its config.
    const FILTER: &'static str;

    /// What serde cannot check; the error says why, without the prefix.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    /// Parses and checks `json` as this config.
    ///
    /// An object is parsed straight into `Self`: a fresh instance parses its
    /// config on its first call, and a `serde_json::Value` tree built and
    /// dropped first was most of that call's work.
    fn parse(json: &str) -> Result<Self, String> {
        let bad = |why: &dyn std::fmt::Display| format!("{}: bad config: {why}", Self::FILTER);
        // A JSON text is an object when its first token is `{`; anything
        // else is parsed as a value only to say what is wrong with it.
        if !json.trim_start().starts_with('{') {
            serde_json::from_str::<serde_json::Value>(json).map_err(|e| bad(&e))?;
            return Err(bad(&"the config is not a JSON object"));
        }
        let config: Self = serde_json::from_str(json).map_err(|e| bad(&without_position(&e)))?;
        config.check().map_err(|why| bad(&why))?;
        Ok(config)
    }
}

/// `error`'s message, with the position left out of a data error (a wrong
/// type, a missing or unknown key): the JSON is the host's rendering of the
/// manifest's table, whose lines and columns are not the manifest's. A
/// syntax error keeps it.
fn without_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    if !error.is_data() {
        return message;
    }
    // serde_json writes a positioned error as `<message> at line L column C`.
    let position = format!(" at line {} column {}", error.line(), error.column());
    match message.strip_suffix(&position) {
        Some(bare) => bare.to_owned(),
        None => message,
    }
}

/// What the instance's first [`config`] call made of `host.config`.
type Parsed = Result<Box<dyn Any + Send + Sync>, String>;

static CONFIG: OnceLock<Parsed> = OnceLock::new();

/// The filter's config, parsed on the instance's first call. A bad config
/// is logged at `error` on every call that meets it; the error is the call's
/// error outcome (the message starts with the filter's name).
pub fn config<T: FilterConfig>() -> Result<&'static T, String> {
    let parsed = CONFIG.get_or_init(|| {
        T::parse(&host::config()).map(|config| Box::new(config) as Box<dyn Any + Send + Sync>)
    });
    let config = match parsed {
        Ok(config) => config.downcast_ref::<T>().ok_or_else(|| {
            format!(
                "{}: config::<{}>() after the config was parsed as another type",
                T::FILTER,
                type_name::<T>()
            )
        }),
        Err(message) => Err(message.clone()),
    };
    if let Err(message) = &config {
        crate::error!("{message}");
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Limits {
        max: u32,
    }

    impl FilterConfig for Limits {
        const FILTER: &'static str = "limits";

        fn check(&self) -> Result<(), String> {
            if self.max == 0 {
                return Err("max is 0".into());
            }
            Ok(())
        }
    }

    #[test]
    fn every_error_names_the_filter_and_says_why() {
        for (json, why) in [
            ("", "EOF while parsing a value at line 1 column 0"),
            ("[]", "the config is not a JSON object"),
            (
                r#"{"max": 1, "min": 0}"#,
                "unknown field `min`, expected `max`",
            ),
            (
                r#"{"max": "1"}"#,
                "invalid type: string \"1\", expected u32",
            ),
            (r#"{"max": 0}"#, "max is 0"),
            (r#"  {"max": 1, "max": 2}"#, "duplicate field `max`"),
            ("{}", "missing field `max`"),
            (
                r#"{"max": 1"#,
                "EOF while parsing an object at line 1 column 9",
            ),
            ("x", "expected value at line 1 column 1"),
            (r#""{}""#, "the config is not a JSON object"),
        ] {
            assert_eq!(
                Limits::parse(json).unwrap_err(),
                format!("limits: bad config: {why}"),
                "{json}"
            );
        }
        assert_eq!(Limits::parse(r#"{"max": 3}"#).unwrap().max, 3);
    }
}
