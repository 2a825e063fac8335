//! `[hsts]`: the `Strict-Transport-Security` directives, checked and joined
//! into the header value the chain sends.

use http::HeaderValue;
use toml::Spanned;

use super::complete::Completer;

impl Completer<'_> {
    pub(super) fn hsts(&mut self, directives: &[Spanned<String>]) -> Option<HeaderValue> {
        let mut has_max_age = false;
        for directive in directives {
            let text = directive.get_ref();
            if let Some(seconds) = text.strip_prefix("max-age=") {
                has_max_age = true;
                if seconds.parse::<u64>().is_err() {
                    self.at(
                        directive,
                        "hsts.directives",
                        format!("{text:?}: max-age must be a number of seconds"),
                    );
                }
            } else if text != "includeSubDomains" && text != "preload" {
                self.at(
                    directive,
                    "hsts.directives",
                    format!("{text:?} is not one of max-age=<seconds>, includeSubDomains, preload"),
                );
            }
        }
        if !has_max_age {
            self.problem(
                directives.first().map(Spanned::span),
                "hsts.directives",
                "must include max-age=<seconds>",
            );
            return None;
        }
        let joined: Vec<&str> = directives.iter().map(|d| d.get_ref().as_str()).collect();
        HeaderValue::from_str(&joined.join("; ")).ok()
    }
}
