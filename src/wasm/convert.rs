//! The records a filter receives, built from the request: the request view
//! for authenticators, request info and user info for everyone after them,
//! each optional field filled only for a filter that reads it
//! ([`Reads`]). Conversions only; no decisions are made here.

use std::sync::Arc;

use super::bindings::types;
use crate::config::stages::{ReadField, Reads, RequestHeaders};
use crate::context::{ConnectionInfo, UserInfo};
use crate::request_info::RequestInfo;

/// `value`, for a filter that reads `field`.
fn read(reads: Reads, field: ReadField, value: &str) -> Option<String> {
    reads.includes(field).then(|| value.to_owned())
}

/// What an authenticator sees of the request: every header, or those the
/// manifest lists for it, and the fields it reads.
pub fn request_view(
    parts: &http::request::Parts,
    selected: &RequestHeaders,
    reads: Reads,
) -> types::RequestView {
    let connection = parts.extensions.get::<ConnectionInfo>();
    types::RequestView {
        method: read(reads, ReadField::Method, parts.method.as_str()),
        path: read(reads, ReadField::Path, parts.uri.path()),
        query: read(reads, ReadField::Query, parts.uri.query().unwrap_or("")),
        headers: parts
            .headers
            .iter()
            .filter(|(name, _)| selected.includes(name))
            .map(|(name, value)| types::Header {
                name: name.as_str().to_owned(),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })
            .collect(),
        remote_addr: read(
            reads,
            ReadField::RemoteAddr,
            connection.map_or("", |c| &c.remote_text),
        ),
        client_certificate: connection.and_then(client_certificate),
    }
}

fn client_certificate(connection: &ConnectionInfo) -> Option<types::ClientCertificate> {
    let chain = connection.client_chain.as_ref()?;
    let leaf = chain.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = parsed.subject();
    let text =
        |attr: &x509_parser::x509::AttributeTypeAndValue| attr.as_str().ok().map(str::to_owned);
    Some(types::ClientCertificate {
        common_name: subject.iter_common_name().next().and_then(text),
        organizations: subject.iter_organization().filter_map(text).collect(),
        subject: subject.to_string(),
        chain_der: chain.iter().map(|cert| cert.as_ref().to_vec()).collect(),
    })
}

/// The request info as the WIT record a filter that reads `reads` receives.
/// Each field is copied as a `str` (`to_owned`), not through `Display` as
/// `CompactString::to_string` would: the formatter's padding logic on every
/// field was 60% of this function's instructions (callgrind, bench/README.md).
pub fn request_info(info: &RequestInfo, reads: Reads) -> types::RequestInfo {
    types::RequestInfo {
        is_resource_request: info.is_resource_request,
        path: info.path.as_str().to_owned(),
        verb: info.verb.as_str().to_owned(),
        api_prefix: read(reads, ReadField::ApiPrefix, &info.api_prefix),
        api_group: info.api_group.as_str().to_owned(),
        api_version: read(reads, ReadField::ApiVersion, &info.api_version),
        namespace: info.namespace.as_str().to_owned(),
        resource: info.resource.as_str().to_owned(),
        subresource: info.subresource.as_str().to_owned(),
        name: info.name.as_str().to_owned(),
        label_selector: read(reads, ReadField::LabelSelector, &info.label_selector),
        field_selector: read(reads, ReadField::FieldSelector, &info.field_selector),
    }
}

/// The user as the WIT record filters receive.
pub fn user_to_wit(user: &UserInfo) -> types::UserInfo {
    types::UserInfo {
        name: user.name.clone(),
        uid: user.uid.clone(),
        groups: user.groups.clone(),
        extra: user
            .extra
            .iter()
            .map(|(key, values)| types::ExtraValue {
                key: key.clone(),
                values: values.clone(),
            })
            .collect(),
    }
}

/// The user an authenticator named, as the request goes on as it: in
/// `system:authenticated`, where kube's `AuthenticatedGroupAdder` puts every
/// authenticated user
/// (`staging/src/k8s.io/apiserver/pkg/authentication/group/authenticated_group_adder.go`),
/// and whether the group was added (last) here. Made once per answer, so the
/// answer an authenticator's cache keeps is the user, shared.
pub(crate) fn authenticated_user(user: types::UserInfo) -> (Arc<UserInfo>, bool) {
    const AUTHENTICATED: &str = "system:authenticated";
    let mut user = user_from_wit(user);
    let add =
        user.name != "system:anonymous" && !user.groups.iter().any(|group| group == AUTHENTICATED);
    if add {
        user.groups.push(AUTHENTICATED.to_owned());
    }
    (Arc::new(user), add)
}

fn user_from_wit(user: types::UserInfo) -> UserInfo {
    UserInfo {
        name: user.name,
        uid: user.uid,
        groups: user.groups,
        extra: user
            .extra
            .into_iter()
            .map(|extra| (extra.key, extra.values))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> http::request::Parts {
        let request = http::Request::get("/apis/g/v1/widgets?labelSelector=a")
            .header("authorization", "Bearer t")
            .header("accept", "application/json")
            .body(())
            .expect("a request");
        request.into_parts().0
    }

    #[test]
    fn a_view_carries_the_fields_the_filter_reads() {
        let headers = RequestHeaders::Only(vec![http::header::AUTHORIZATION]);
        let every = request_view(&parts(), &headers, Reads::ALL);
        assert_eq!(every.method.as_deref(), Some("GET"));
        assert_eq!(every.path.as_deref(), Some("/apis/g/v1/widgets"));
        assert_eq!(every.query.as_deref(), Some("labelSelector=a"));
        assert_eq!(every.remote_addr.as_deref(), Some(""));
        assert_eq!(every.headers.len(), 1);

        let path_only = request_view(&parts(), &headers, [ReadField::Path].into_iter().collect());
        assert_eq!(path_only.path.as_deref(), Some("/apis/g/v1/widgets"));
        assert_eq!(
            (path_only.method, path_only.query, path_only.remote_addr),
            (None, None, None)
        );
        assert_eq!(path_only.headers.len(), 1, "headers follow `headers` alone");
    }

    #[test]
    fn request_info_carries_the_options_the_filter_reads() {
        let info = RequestInfo::resolve(
            &http::Method::GET,
            "/apis/g/v1/widgets",
            Some("labelSelector=a"),
        );
        let every = request_info(&info, Reads::ALL);
        assert_eq!(every.api_prefix.as_deref(), Some("apis"));
        assert_eq!(every.api_version.as_deref(), Some("v1"));
        assert_eq!(every.label_selector.as_deref(), Some("a"));
        assert_eq!(every.field_selector.as_deref(), Some(""));
        let none = request_info(&info, std::iter::empty().collect());
        assert_eq!(
            (
                none.api_prefix,
                none.api_version,
                none.label_selector,
                none.field_selector
            ),
            (None, None, None, None)
        );
        assert_eq!(
            (none.verb.as_str(), none.resource.as_str()),
            ("list", "widgets")
        );
    }

    /// kube's AuthenticatedGroupAdder: every authenticated user is in
    /// `system:authenticated`, added once (last), never to the anonymous
    /// user, and the answer says whether it was added.
    #[test]
    fn an_authenticated_user_is_in_system_authenticated_once() {
        let named = |name: &str, groups: &[&str]| types::UserInfo {
            name: name.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|group| (*group).to_owned()).collect(),
            extra: Vec::new(),
        };
        let (alice, added) = authenticated_user(named("alice", &["dev"]));
        assert_eq!(alice.groups, ["dev", "system:authenticated"]);
        assert!(added);
        let (bob, added) = authenticated_user(named("bob", &["system:authenticated", "ops"]));
        assert_eq!(bob.groups, ["system:authenticated", "ops"]);
        assert!(!added);
        let (anonymous, added) = authenticated_user(named("system:anonymous", &[]));
        assert!(anonymous.groups.is_empty());
        assert!(!added);
    }
}
