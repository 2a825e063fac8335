//! `[[hooks]]`: lifecycle hooks, commands run after the listener is up or
//! when shutdown begins.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::Name;
use super::bounds;
use super::complete::Completer;
use super::manifest as m;

/// A lifecycle hook: a command run after the listener is up or when
/// shutdown begins.
#[derive(Debug, Clone)]
pub(crate) struct Hook {
    pub name: Name,
    pub phase: HookPhase,
    /// The program and its arguments; run without a shell.
    pub command: Vec<String>,
    /// The manifest's folder: hooks run there, as every path resolves there.
    pub working_dir: PathBuf,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HookPhase {
    PostStart,
    PreShutdown,
}

impl Completer<'_> {
    pub(super) fn hooks(&mut self, hooks: &[Spanned<m::Hook>]) -> Vec<Hook> {
        let mut seen = HashSet::new();
        let mut completed = Vec::new();
        for (index, hook) in hooks.iter().enumerate() {
            let key = format!("hooks[{index}]");
            let hook = hook.get_ref();
            let name = self.name(&hook.name, &format!("{key}.name"));
            let phase = match hook.phase.get_ref().as_str() {
                "post-start" => Some(HookPhase::PostStart),
                "pre-shutdown" => Some(HookPhase::PreShutdown),
                other => {
                    let message =
                        format!("{other:?} is not one of \"post-start\", \"pre-shutdown\"");
                    self.at(&hook.phase, &format!("{key}.phase"), message);
                    None
                }
            };
            // An empty program name passes as a command but cannot be
            // spawned: a post-start hook would hold readyz back for good.
            if hook.command.get_ref().first().is_none_or(String::is_empty) {
                self.at(
                    &hook.command,
                    &format!("{key}.command"),
                    "must name a program to run",
                );
            }
            let timeout = self.duration(
                &hook.timeout,
                &format!("{key}.timeout"),
                Duration::from_secs(30),
                bounds::HOOK_TIMEOUT,
            );
            let (Some(name), Some(phase)) = (name, phase) else {
                continue;
            };
            if !seen.insert((name.clone(), phase)) {
                self.at(
                    &hook.name,
                    &format!("{key}.name"),
                    format!(
                        "{:?} is used by another hook of the same phase",
                        name.as_str()
                    ),
                );
            }
            let working_dir = self.resolve(".");
            completed.push(Hook {
                name,
                phase,
                command: hook.command.get_ref().clone(),
                working_dir,
                timeout,
            });
        }
        completed
    }
}
