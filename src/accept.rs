//! A request's `Accept`, read as kube reads it for content negotiation
//! (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/negotiation/negotiate.go`,
//! by way of goautoneg's `ParseAccept`): its media ranges with their
//! parameters and `q`, the preferred first: a higher `q`, then a concrete
//! type before a `*`, then more parameters; otherwise in the client's
//! order. A range with `q=0` is refused, so it is left out. Discovery and
//! OpenAPI choose their answer's form from this list.

use http::HeaderMap;
use http::header::ACCEPT;

/// One media range of `Accept` (`type/subtype`, lower-cased).
#[derive(Debug, PartialEq)]
pub(crate) struct MediaRange {
    media: String,
    params: Vec<(String, String)>,
    q: f32,
}

impl MediaRange {
    /// The value of parameter `key` (`g`, `v`, `as`), as sent.
    pub(crate) fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// Whether this range takes `media` (`type/subtype`), either part
    /// matched by a `*`.
    pub(crate) fn takes(&self, media: &str) -> bool {
        let (range_type, range_subtype) = self.media.split_once('/').unwrap_or((&self.media, ""));
        let (media_type, media_subtype) = media.split_once('/').unwrap_or((media, ""));
        (range_type == "*" || range_type == media_type)
            && (range_subtype == "*" || range_subtype == media_subtype)
    }

    fn wildcards(&self) -> usize {
        self.media.matches('*').count()
    }
}

/// `Accept`'s ranges, the preferred first; empty when the request has no
/// `Accept` (or none that parses).
pub(crate) fn ranges(headers: &HeaderMap) -> Vec<MediaRange> {
    let mut ranges: Vec<MediaRange> = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(media_range)
        .filter(|range| range.q > 0.0)
        .collect();
    // Stable: ranges alike keep the client's order.
    ranges.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then_with(|| a.wildcards().cmp(&b.wildcards()))
            .then_with(|| b.params.len().cmp(&a.params.len()))
    });
    ranges
}

/// One clause of `Accept`; `None` for one that is not `type/subtype` or
/// `*`. An unreadable `q` is 0 (refused).
fn media_range(clause: &str) -> Option<MediaRange> {
    let mut parts = clause.split(';').map(str::trim);
    let media = parts.next()?.to_ascii_lowercase();
    let media = match media.as_str() {
        "*" => "*/*".to_owned(),
        _ if media.split('/').count() == 2 => media,
        _ => return None,
    };
    let mut q = 1.0;
    let mut params = Vec::new();
    for (key, value) in parts.filter_map(|param| param.split_once('=')) {
        let (key, value) = (key.trim(), value.trim());
        if key == "q" {
            q = value.parse().unwrap_or(0.0);
        } else {
            params.push((key.to_owned(), value.to_owned()));
        }
    }
    Some(MediaRange { media, params, q })
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn medias(accept: &str) -> Vec<String> {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_str(accept).unwrap());
        ranges(&headers)
            .into_iter()
            .map(|range| range.media)
            .collect()
    }

    #[test]
    fn ranges_are_sorted_by_q_then_specificity_then_the_clients_order() {
        assert_eq!(
            medias("*/*;q=0.5, application/*, text/plain, application/json;q=0.9"),
            ["text/plain", "application/*", "application/json", "*/*"]
        );
        assert_eq!(medias("b/b, a/a"), ["b/b", "a/a"]);
        assert_eq!(medias("a/a, a/a;v=1"), ["a/a", "a/a"]);
        assert_eq!(
            ranges(&{
                let mut headers = HeaderMap::new();
                headers.insert(ACCEPT, HeaderValue::from_static("a/a, a/a;g=x;v=1"));
                headers
            })[0]
                .param("g"),
            Some("x"),
            "more parameters first"
        );
    }

    #[test]
    fn refused_and_unreadable_ranges_are_left_out() {
        assert_eq!(medias("a/a;q=0, nonsense, b/b;q=x, *"), ["*/*"]);
        assert!(ranges(&HeaderMap::new()).is_empty());
    }

    #[test]
    fn a_range_takes_what_its_wildcards_allow() {
        let range = |text: &str| media_range(text).unwrap();
        assert!(range("application/*").takes("application/json"));
        assert!(range("*/*").takes("application/json"));
        assert!(!range("text/*").takes("application/json"));
        assert!(range("Application/JSON").takes("application/json"));
    }
}
