//! Pure logic of `jsonl-audit`: its config, and which of a serialised
//! batch's lines it writes. The gateway renders the lines (kube's
//! `audit.k8s.io/v1` `Event`s, as its log backend writes them); the filter
//! only drops the lines of the stages its config omits, by the batch's
//! `stages`, without parsing JSON. No host calls, so it runs in host-target
//! tests.

use std::borrow::Cow;

use serde::Deserialize;
use wasmgate_filter::FilterConfig;
use wasmgate_filter::json_auditor::{JsonBatch, Stage};

/// The filter's `config` table; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Stages not to write, by their Kubernetes names (`RequestReceived`, ...),
    /// like the audit policy's `omitStages`.
    #[serde(default)]
    pub omit_stages: Vec<String>,
}

const STAGES: [&str; 4] = [
    "RequestReceived",
    "ResponseStarted",
    "ResponseComplete",
    "Panic",
];

impl FilterConfig for Config {
    const FILTER: &'static str = "jsonl-audit";

    fn check(&self) -> Result<(), String> {
        for stage in &self.omit_stages {
            if !STAGES.contains(&stage.as_str()) {
                return Err(format!(
                    "unknown stage {stage:?} in omit_stages (expected one of {STAGES:?})"
                ));
            }
        }
        Ok(())
    }
}

impl Config {
    fn omits(&self, stage: Stage) -> bool {
        let name = stage_name(stage);
        self.omit_stages.iter().any(|omitted| omitted == name)
    }
}

pub fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::RequestReceived => STAGES[0],
        Stage::ResponseStarted => STAGES[1],
        Stage::ResponseComplete => STAGES[2],
        Stage::Panic => STAGES[3],
    }
}

/// The bytes to append to the sink: the whole batch when no stage is
/// omitted, else its lines whose stage is not. Fails when the batch has
/// not one stage per line.
pub fn kept_lines<'a>(config: &Config, batch: &'a JsonBatch) -> Result<Cow<'a, [u8]>, String> {
    if config.omit_stages.is_empty() {
        return Ok(Cow::Borrowed(&batch.lines));
    }
    let lines = batch.lines.split_inclusive(|byte| *byte == b'\n');
    if lines.clone().count() != batch.stages.len() {
        return Err(format!(
            "jsonl-audit: the batch has {} lines but {} stages",
            lines.count(),
            batch.stages.len()
        ));
    }
    let mut kept = Vec::with_capacity(batch.lines.len());
    for (line, stage) in lines.zip(&batch.stages) {
        if !config.omits(*stage) {
            kept.extend_from_slice(line);
        }
    }
    Ok(Cow::Owned(kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> JsonBatch {
        JsonBatch {
            lines: b"{\"stage\":\"RequestReceived\"}\n{\"stage\":\"ResponseComplete\"}\n{\"stage\":\"Panic\"}\n".to_vec(),
            stages: vec![Stage::RequestReceived, Stage::ResponseComplete, Stage::Panic],
        }
    }

    #[test]
    fn without_omitted_stages_the_whole_batch_is_kept_as_it_is() {
        let batch = batch();
        let kept = kept_lines(&Config::default(), &batch).unwrap();
        assert!(matches!(kept, Cow::Borrowed(_)));
        assert_eq!(kept.as_ref(), batch.lines.as_slice());
    }

    #[test]
    fn omit_stages_drops_those_lines_by_the_stages_list() {
        let c = Config::parse(r#"{"omit_stages": ["RequestReceived", "Panic"]}"#).unwrap();
        let batch = batch();
        let kept = kept_lines(&c, &batch).unwrap();
        assert_eq!(kept.as_ref(), b"{\"stage\":\"ResponseComplete\"}\n");
        let all =
            Config::parse(r#"{"omit_stages": ["RequestReceived", "ResponseComplete", "Panic"]}"#)
                .unwrap();
        assert!(kept_lines(&all, &batch).unwrap().is_empty());
    }

    #[test]
    fn a_batch_without_one_stage_per_line_is_an_error() {
        let c = Config::parse(r#"{"omit_stages": ["Panic"]}"#).unwrap();
        let short = JsonBatch {
            stages: vec![Stage::RequestReceived],
            ..batch()
        };
        assert_eq!(
            kept_lines(&c, &short).unwrap_err(),
            "jsonl-audit: the batch has 3 lines but 1 stages"
        );
    }

    #[test]
    fn config() {
        for bad in [
            "[]",
            r#"{"omit_stages": ["Done"]}"#,
            r#"{"omitStages": []}"#,
        ] {
            assert!(
                Config::parse(bad)
                    .unwrap_err()
                    .starts_with("jsonl-audit: bad config: "),
                "{bad}"
            );
        }
        assert!(Config::parse("{}").is_ok());
    }
}
