//! The records a filter receives, built from the request: the request view
//! for authenticators, request info and user info for everyone after them.
//! Conversions only; no decisions are made here.

use super::bindings::types;
use crate::config::stages::RequestHeaders;
use crate::context::{ConnectionInfo, UserInfo};
use crate::request_info::RequestInfo;

/// What an authenticator sees of the request: every header, or those the
/// manifest lists for it.
pub fn request_view(parts: &http::request::Parts, selected: &RequestHeaders) -> types::RequestView {
    let connection = parts.extensions.get::<ConnectionInfo>();
    types::RequestView {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        headers: parts
            .headers
            .iter()
            .filter(|(name, _)| selected.includes(name))
            .map(|(name, value)| types::Header {
                name: name.as_str().to_owned(),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })
            .collect(),
        remote_addr: connection
            .map(|c| c.remote_text.clone())
            .unwrap_or_default(),
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

/// The request info as the WIT record filters receive.
pub fn request_info(info: &RequestInfo) -> types::RequestInfo {
    types::RequestInfo {
        is_resource_request: info.is_resource_request,
        path: info.path.clone(),
        verb: info.verb.clone(),
        api_prefix: info.api_prefix.clone(),
        api_group: info.api_group.clone(),
        api_version: info.api_version.clone(),
        namespace: info.namespace.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        name: info.name.clone(),
        parts: info.parts.clone(),
        label_selector: info.label_selector.clone(),
        field_selector: info.field_selector.clone(),
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

pub(crate) fn user_from_wit(user: types::UserInfo) -> UserInfo {
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
