//! How a request's query is read, as far as it can change a
//! [`RequestInfo`](super::RequestInfo): Go's `url.ParseQuery` (Go's `net/url/url.go`), and
//! the decoding of its values into kube's internal `ListOptions`
//! (`Convert_v1_ListOptions_To_internalversion_ListOptions` in
//! `staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/conversion.go`,
//! with `Convert_Slice_string_To_bool` and `Convert_Slice_string_To_int64` from
//! `staging/src/k8s.io/apimachinery/pkg/runtime/conversion.go`).

use url::form_urlencoded;

use super::fields::{InvalidFieldSelector, field_selector_exact_match};
use super::labels::label_selector_is_valid;
use super::path::has_malformed_escape;

/// Go's `url.ParseQuery`, errors ignored (as `URL.Query()` does): split on `&`,
/// drop empty pairs, pairs containing `;` and pairs with a malformed escape; the
/// rest is form-decoded (`+` is a space). Order and repeats are kept.
pub(crate) fn go_parse_query(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|pair| !pair.is_empty() && !pair.contains(';') && !has_malformed_escape(pair))
        .filter_map(|pair| form_urlencoded::parse(pair.as_bytes()).next())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// `url.Values[key][0]`.
pub(crate) fn first_value<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// What `NewRequestInfo` uses from the decoded internal `ListOptions`.
pub(super) struct ListOptions {
    pub(super) watch: bool,
    /// `FieldSelector.RequiresExactMatch("metadata.name")`.
    pub(super) exact_name: Option<String>,
}

/// `DecodeParameters` into `ListOptions` failed (kube then ignores the result).
pub(super) struct ListOptionsError;

/// The parts of query-to-`ListOptions` decoding that can fail or that kube reads:
/// every field that can make the conversion fail is checked, since any failure
/// discards the `metadata.name` shortcut.
pub(super) fn decode_list_options(
    params: &[(String, String)],
) -> Result<ListOptions, ListOptionsError> {
    let watch = first_value(params, "watch").is_some_and(go_query_bool);
    // allowWatchBookmarks, sendInitialEvents: bool conversions, which cannot fail.
    // resourceVersion, resourceVersionMatch, continue: plain strings.
    for key in ["timeoutSeconds", "limit"] {
        if let Some(v) = first_value(params, key)
            && v.parse::<i64>().is_err()
        {
            return Err(ListOptionsError);
        }
    }
    if !label_selector_is_valid(first_value(params, "labelSelector").unwrap_or("")) {
        return Err(ListOptionsError);
    }
    let exact_name = field_selector_exact_match(
        first_value(params, "fieldSelector").unwrap_or(""),
        "metadata.name",
    )
    .map_err(|InvalidFieldSelector| ListOptionsError)?;
    Ok(ListOptions { watch, exact_name })
}

/// `runtime.Convert_Slice_string_To_bool`: false only for `0` or a string that is
/// `strings.EqualFold` to `false` (Unicode simple folding: `ſ` folds to `s`).
pub(crate) fn go_query_bool(v: &str) -> bool {
    if v == "0" {
        return false;
    }
    let mut chars = v.chars();
    let equal_fold_false = "false".chars().all(|want| {
        chars
            .next()
            .is_some_and(|c| c.to_ascii_lowercase() == want || (want == 's' && c == '\u{17F}'))
    }) && chars.next().is_none();
    !equal_fold_false
}
