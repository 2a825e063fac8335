//! `labels.Parse` (`staging/src/k8s.io/apimachinery/pkg/labels/selector.go`),
//! reduced to a validity check, with the key and value checks it calls
//! (`IsQualifiedName`, `IsValidLabelValue`, `IsDNS1123Subdomain` in
//! `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`): a label
//! selector that fails to parse makes kube drop the `metadata.name` shortcut.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn literal_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_label_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// kube's byte-wise selector lexer. Like kube's, it treats a NUL byte as the end
/// of input for the token being read.
struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn read(&mut self) -> u8 {
        match self.s.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn scan_id_or_keyword(&mut self) -> (Token, &'a str) {
        let start = self.pos;
        let end = loop {
            let before = self.pos;
            let ch = self.read();
            if ch == 0 {
                break before;
            }
            if is_special_symbol(ch) || is_label_whitespace(ch) {
                self.unread();
                break self.pos;
            }
        };
        // Token boundaries are ASCII bytes, hence char boundaries.
        let lit = self.s.get(start..end).unwrap_or("");
        match literal_token(lit.as_bytes()) {
            Some(tok) => (tok, lit),
            None => (Token::Identifier, lit),
        }
    }

    fn scan_special_symbol(&mut self) -> (Token, &'a str) {
        let start = self.pos;
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            let buffer = self.s.as_bytes().get(start..self.pos).unwrap_or(b"");
            if let Some(tok) = literal_token(buffer) {
                last = Some((tok, self.pos));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((tok, end)) => (tok, self.s.get(start..end).unwrap_or("")),
            None => (Token::Error, ""),
        }
    }

    fn lex(&mut self) -> (Token, &'a str) {
        let mut ch = self.read();
        while is_label_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, "");
        }
        self.unread();
        if is_special_symbol(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_id_or_keyword()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Exists,
    DoesNotExist,
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ParserContext {
    KeyAndOperator,
    Values,
}

struct LabelParser<'a> {
    items: Vec<(Token, &'a str)>,
    position: usize,
}

/// A label selector was not valid (the reason does not matter here).
struct InvalidLabelSelector;

type LabelResult<T> = Result<T, InvalidLabelSelector>;

impl<'a> LabelParser<'a> {
    fn new(selector: &'a str) -> Self {
        let mut lexer = Lexer {
            s: selector,
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            items.push(item);
            if item.0 == Token::EndOfString {
                break;
            }
        }
        LabelParser { items, position: 0 }
    }

    fn contextual(item: (Token, &'a str), ctx: ParserContext) -> (Token, &'a str) {
        match item.0 {
            Token::In | Token::NotIn if ctx == ParserContext::Values => (Token::Identifier, item.1),
            _ => item,
        }
    }

    fn lookahead(&self, ctx: ParserContext) -> (Token, &'a str) {
        let item = self
            .items
            .get(self.position)
            .copied()
            .unwrap_or((Token::EndOfString, ""));
        Self::contextual(item, ctx)
    }

    fn consume(&mut self, ctx: ParserContext) -> (Token, &'a str) {
        let item = self.lookahead(ctx);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> LabelResult<()> {
        loop {
            match self.lookahead(ParserContext::Values).0 {
                Token::Identifier | Token::DoesNotExist => {
                    self.parse_requirement()?;
                    match self.consume(ParserContext::Values).0 {
                        Token::EndOfString => return Ok(()),
                        Token::Comma => {
                            let next = self.lookahead(ParserContext::Values).0;
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(InvalidLabelSelector);
                            }
                        }
                        _ => return Err(InvalidLabelSelector),
                    }
                }
                Token::EndOfString => return Ok(()),
                _ => return Err(InvalidLabelSelector),
            }
        }
    }

    fn parse_requirement(&mut self) -> LabelResult<()> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = inferred {
            return check_requirement(key, op, &[]);
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        check_requirement(key, op, &values)
    }

    fn parse_key_and_infer_operator(&mut self) -> LabelResult<(&'a str, Option<Operator>)> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(ParserContext::Values);
        if tok == Token::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(ParserContext::Values);
        }
        if tok != Token::Identifier || !is_qualified_name(lit) {
            return Err(InvalidLabelSelector);
        }
        let next = self.lookahead(ParserContext::Values).0;
        if (next == Token::EndOfString || next == Token::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> LabelResult<Operator> {
        Ok(match self.consume(ParserContext::KeyAndOperator).0 {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(InvalidLabelSelector),
        })
    }

    fn parse_values(&mut self) -> LabelResult<Vec<&'a str>> {
        if self.consume(ParserContext::Values).0 != Token::OpenPar {
            return Err(InvalidLabelSelector);
        }
        match self.lookahead(ParserContext::Values).0 {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                if self.consume(ParserContext::Values).0 != Token::ClosedPar {
                    return Err(InvalidLabelSelector);
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(ParserContext::Values);
                Ok(vec![""])
            }
            _ => Err(InvalidLabelSelector),
        }
    }

    fn parse_identifiers_list(&mut self) -> LabelResult<Vec<&'a str>> {
        let mut values = Vec::new();
        loop {
            let (tok, lit) = self.consume(ParserContext::Values);
            match tok {
                Token::Identifier => {
                    values.push(lit);
                    match self.lookahead(ParserContext::Values).0 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(InvalidLabelSelector),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push("");
                    }
                    match self.lookahead(ParserContext::Values).0 {
                        Token::ClosedPar => {
                            values.push("");
                            return Ok(values);
                        }
                        Token::Comma => {
                            self.consume(ParserContext::Values);
                            values.push("");
                        }
                        _ => {}
                    }
                }
                _ => return Err(InvalidLabelSelector),
            }
        }
    }

    fn parse_exact_value(&mut self) -> LabelResult<Vec<&'a str>> {
        let next = self.lookahead(ParserContext::Values).0;
        if next == Token::EndOfString || next == Token::Comma {
            return Ok(vec![""]);
        }
        match self.consume(ParserContext::Values) {
            (Token::Identifier, lit) => Ok(vec![lit]),
            _ => Err(InvalidLabelSelector),
        }
    }
}

/// `labels.NewRequirement`'s checks. The parser deduplicates values into a set;
/// only the count matters here, so duplicates are removed before counting.
fn check_requirement(key: &str, op: Operator, values: &[&str]) -> LabelResult<()> {
    if !is_qualified_name(key) {
        return Err(InvalidLabelSelector);
    }
    let mut distinct: Vec<&str> = values.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let count_ok = match op {
        Operator::In | Operator::NotIn => !distinct.is_empty(),
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => distinct.len() == 1,
        Operator::Exists | Operator::DoesNotExist => distinct.is_empty(),
        Operator::GreaterThan | Operator::LessThan => {
            distinct.len() == 1 && distinct.iter().all(|v| v.parse::<i64>().is_ok())
        }
    };
    if !count_ok || !distinct.iter().all(|v| is_valid_label_value(v)) {
        return Err(InvalidLabelSelector);
    }
    Ok(())
}

pub(super) fn label_selector_is_valid(selector: &str) -> bool {
    LabelParser::new(selector).parse().is_ok()
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn matches_qualified_name_pattern(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `validation.IsQualifiedName`: `[dns-subdomain "/"] name`, name at most 63 bytes.
fn is_qualified_name(value: &str) -> bool {
    let parts: Vec<&str> = value.split('/').collect();
    let (prefix_ok, name) = match parts.as_slice() {
        [name] => (true, *name),
        [prefix, name] => (!prefix.is_empty() && is_dns1123_subdomain(prefix), *name),
        _ => return false,
    };
    prefix_ok && !name.is_empty() && name.len() <= 63 && matches_qualified_name_pattern(name)
}

/// `validation.IsValidLabelValue`: empty, or a qualified-name-shaped string of at
/// most 63 bytes.
fn is_valid_label_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 63 && matches_qualified_name_pattern(value))
}

/// `validation.IsDNS1123Label`: one label of at most 63 bytes, `[a-z0-9-]`
/// starting and ending with `[a-z0-9]`.
pub(crate) fn is_dns1123_label(value: &str) -> bool {
    value.len() <= 63 && !value.contains('.') && is_dns1123_subdomain(value)
}

/// `validation.IsDNS1123Subdomain`: at most 253 bytes of dot-separated labels made
/// of `[a-z0-9-]`, each starting and ending with `[a-z0-9]`.
pub(crate) fn is_dns1123_subdomain(value: &str) -> bool {
    value.len() <= 253
        && value.split('.').all(|label| {
            let b = label.as_bytes();
            let edge =
                |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            edge(b.first())
                && edge(b.last())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selector_validation() {
        #[rustfmt::skip]
        let valid = [
            "", "a", "a=b", "a==b", "a!=b", "a=", "!a", "a in (b)", "a notin (b,c)",
            "a in ()", "a in (,)", "a in (b,)", "x in (in)", "a<1", "a>10", " a = b , c ",
            "example.com/a=b", "a=b \0ignored garbage", "in", "notin=in",
        ];
        for ok in valid {
            assert!(label_selector_is_valid(ok), "{ok:?} should be valid");
        }
        #[rustfmt::skip]
        let invalid = [
            ",", "a,", "a b", "!a=b", "a in b", "a in (b", "a=(b)", "a=b=c", "a>", "a>1.5", "a>-1",
            "a<-1", "a=b\0garbage", "Example.com/a", "/a", "a/b/c", "a=-b", "a in (b c)", "in in", "a notin",
        ];
        for bad in invalid {
            assert!(!label_selector_is_valid(bad), "{bad:?} should be invalid");
        }
        let long = "a".repeat(64);
        assert!(!label_selector_is_valid(&long));
        assert!(!label_selector_is_valid(&format!("a={long}")));
        assert!(label_selector_is_valid(&"a".repeat(63)));
    }
}
