//! Pure logic of `x509-authn`: no host calls, so it runs in host-target tests.

use serde::Deserialize;
use wasmgate_filter::FilterConfig;

/// The filter's `config` table; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// When set, only certificates with this organization (O) authenticate;
    /// others get no opinion.
    #[serde(default)]
    pub required_organization: Option<String>,
}

impl FilterConfig for Config {
    const FILTER: &'static str = "x509-authn";

    fn check(&self) -> Result<(), String> {
        if self.required_organization.as_deref() == Some("") {
            return Err("required_organization is empty".into());
        }
        Ok(())
    }
}

/// What this filter reads of the client certificate.
#[derive(Debug, Clone, Copy)]
pub struct Certificate<'a> {
    pub common_name: Option<&'a str>,
    pub organizations: &'a [String],
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    Authenticated { user: String, groups: Vec<String> },
    NoOpinion(String),
}

/// Kubernetes' `CommonNameUserConversion`: no certificate or an empty common
/// name means no opinion; otherwise user = CN, groups = O in order.
pub fn authenticate(config: &Config, cert: Option<Certificate<'_>>) -> Outcome {
    let Some(cert) = cert else {
        return Outcome::NoOpinion("no verified client certificate".into());
    };
    let Some(cn) = cert.common_name.filter(|cn| !cn.is_empty()) else {
        return Outcome::NoOpinion("the client certificate has no common name".into());
    };
    if let Some(required) = &config.required_organization
        && !cert.organizations.iter().any(|o| o == required)
    {
        return Outcome::NoOpinion(format!(
            "the client certificate of {cn:?} lacks the required organization {required:?}"
        ));
    }
    Outcome::Authenticated {
        user: cn.to_string(),
        groups: cert.organizations.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn table() {
        let none = Config::parse("{}").unwrap();
        let null = Config::parse(r#"{"required_organization": null}"#).unwrap();
        let dev_only = Config::parse(r#"{"required_organization": "dev"}"#).unwrap();
        let dev_ops = strings(&["dev", "ops"]);
        let empty: Vec<String> = Vec::new();
        let alice = Outcome::Authenticated {
            user: "alice".into(),
            groups: dev_ops.clone(),
        };
        let rows: Vec<(&Config, Option<Certificate>, bool)> = vec![
            (&none, None, false),
            (
                &none,
                Some(Certificate {
                    common_name: Some("alice"),
                    organizations: &dev_ops,
                }),
                true,
            ),
            (
                &null,
                Some(Certificate {
                    common_name: Some("alice"),
                    organizations: &dev_ops,
                }),
                true,
            ),
            (
                &dev_only,
                Some(Certificate {
                    common_name: Some("alice"),
                    organizations: &dev_ops,
                }),
                true,
            ),
            (
                &none,
                Some(Certificate {
                    common_name: None,
                    organizations: &dev_ops,
                }),
                false,
            ),
            (
                &none,
                Some(Certificate {
                    common_name: Some(""),
                    organizations: &dev_ops,
                }),
                false,
            ),
            (
                &dev_only,
                Some(Certificate {
                    common_name: Some("alice"),
                    organizations: &empty,
                }),
                false,
            ),
        ];
        for (i, (config, cert, ok)) in rows.into_iter().enumerate() {
            let got = authenticate(config, cert);
            if ok {
                assert_eq!(got, alice, "row {i}");
            } else {
                assert!(matches!(got, Outcome::NoOpinion(_)), "row {i}: {got:?}");
            }
        }
        assert_eq!(
            authenticate(
                &none,
                Some(Certificate {
                    common_name: Some("bob"),
                    organizations: &empty
                })
            ),
            Outcome::Authenticated {
                user: "bob".into(),
                groups: vec![]
            }
        );
    }

    #[test]
    fn bad_configs() {
        for bad in [
            "[]",
            r#"{"required_organization": ""}"#,
            r#"{"required_organization": 3}"#,
            r#"{"typo": 1}"#,
        ] {
            assert!(
                Config::parse(bad)
                    .unwrap_err()
                    .starts_with("x509-authn: bad config: "),
                "{bad}"
            );
        }
    }
}
