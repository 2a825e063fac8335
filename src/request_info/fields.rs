//! `fields.ParseSelector` (`staging/src/k8s.io/apimachinery/pkg/fields/selector.go`),
//! reduced to what `Selector.RequiresExactMatch("metadata.name")` needs: the
//! resolver takes a list's object name from a `metadata.name=` field selector.

/// A field selector was not valid (the reason does not matter here).
pub(super) struct InvalidFieldSelector;

/// Parses a field selector as kube does and returns the value of the first
/// (in sorted-term order) `field=value` / `field==value` term for `field`.
pub(super) fn field_selector_exact_match(
    selector: &str,
    field: &str,
) -> Result<Option<String>, InvalidFieldSelector> {
    let mut terms = split_field_terms(selector);
    terms.sort_unstable();
    let mut found = None;
    for term in terms {
        if term.is_empty() {
            continue;
        }
        let (lhs, op, rhs) = split_field_term(term).ok_or(InvalidFieldSelector)?;
        let value = unescape_field_value(rhs)?;
        if found.is_none() && op != "!=" && lhs == field {
            found = Some(value);
        }
    }
    Ok(found)
}

/// Splits on commas that are not backslash-escaped (escapes are kept).
fn split_field_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(selector.get(start..i).unwrap_or(""));
            start = i + 1;
        }
    }
    terms.push(selector.get(start..).unwrap_or(""));
    terms
}

/// Splits at the first operator occurrence (`!=`, then `==`, then `=` at each
/// position); the left side has no escaping.
fn split_field_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let remaining = term.get(i..)?;
        for op in ["!=", "==", "="] {
            if remaining.starts_with(op) {
                return Some((term.get(..i)?, op, term.get(i + op.len()..)?));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; a bare `,`
/// or `=` (or a dangling `\`) is an error.
fn unescape_field_value(s: &str) -> Result<String, InvalidFieldSelector> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(InvalidFieldSelector),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(InvalidFieldSelector),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(InvalidFieldSelector);
    }
    Ok(out)
}
