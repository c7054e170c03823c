//! A site's own rules, in the files Netlify and Cloudflare Pages read: `_redirects` (redirects
//! and 200 rewrites, with `:placeholders` and `*` splats, `!` to force over an existing file)
//! and `_headers` (extra response headers per path pattern). Parsed once when the site loads;
//! matching a request walks the pattern's segments against the path's without allocating.
//! Unsupported lines (query conditions, proxying to another host, country or language
//! conditions) are skipped with a warning naming the line.

use http::header::{HeaderName, HeaderValue};
use http::StatusCode;

/// At most this many rules of each file are kept.
pub const MAX_RULES: usize = 1000;
/// At most this many placeholders (and the splat) in one pattern.
const MAX_CAPTURES: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(Box<str>),
    Placeholder(Box<str>),
    /// `*`: the rest of the path (possibly empty); last only.
    Splat,
}

/// A path pattern: `/blog/:year/*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    segments: Vec<Segment>,
}

/// What one pattern captured from a path: `(name, value)`; the splat is named `splat`.
pub struct Captures<'p> {
    values: [(&'p str, &'p str); MAX_CAPTURES],
    len: usize,
}

impl<'p> Captures<'p> {
    fn get(&self, name: &str) -> Option<&'p str> {
        self.values[..self.len]
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| *value)
    }
}

impl Pattern {
    fn parse(text: &str) -> Option<Pattern> {
        let rest = text.strip_prefix('/')?;
        let parts: Vec<&str> = rest.split('/').collect();
        let mut segments = Vec::with_capacity(parts.len());
        let mut captures = 0;
        for (index, part) in parts.iter().enumerate() {
            let segment = if *part == "*" {
                if index + 1 != parts.len() {
                    return None;
                }
                Segment::Splat
            } else if let Some(name) = part.strip_prefix(':') {
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return None;
                }
                Segment::Placeholder(name.into())
            } else {
                if part.contains('*') || part.contains(':') {
                    return None;
                }
                Segment::Literal((*part).into())
            };
            if !matches!(segment, Segment::Literal(_)) {
                captures += 1;
            }
            segments.push(segment);
        }
        (captures <= MAX_CAPTURES).then_some(Pattern { segments })
    }

    /// Matches a decoded request path (`/a/b`); `None` when it does not match.
    pub fn matches<'p>(&'p self, path: &'p str) -> Option<Captures<'p>> {
        let mut captures = Captures {
            values: [("", ""); MAX_CAPTURES],
            len: 0,
        };
        let mut rest = path.strip_prefix('/')?;
        for (index, segment) in self.segments.iter().enumerate() {
            let last = index + 1 == self.segments.len();
            if let Segment::Splat = segment {
                captures.values[captures.len] = ("splat", rest);
                captures.len += 1;
                return Some(captures);
            }
            let (part, remaining) = match rest.split_once('/') {
                Some((part, remaining)) => (part, Some(remaining)),
                None => (rest, None),
            };
            match segment {
                Segment::Literal(literal) if **literal == *part => {}
                Segment::Placeholder(name) if !part.is_empty() => {
                    captures.values[captures.len] = (name, part);
                    captures.len += 1;
                }
                _ => return None,
            }
            match (last, remaining) {
                (true, None) => return Some(captures),
                // `/blog/` against the pattern `/blog`: a trailing slash still matches.
                (true, Some("")) => return Some(captures),
                (true, Some(_)) | (false, None) => {
                    // `/a` against `/a/*`: the splat may be empty.
                    let splat_next = !last
                        && remaining.is_none()
                        && matches!(self.segments.get(index + 1), Some(Segment::Splat))
                        && index + 2 == self.segments.len();
                    if splat_next {
                        captures.values[captures.len] = ("splat", "");
                        captures.len += 1;
                        return Some(captures);
                    }
                    return None;
                }
                (false, Some(remaining)) => rest = remaining,
            }
        }
        None
    }
}

/// One `_redirects` line.
#[derive(Debug, Clone)]
pub struct Redirect {
    from: Pattern,
    /// The target with `:name` and `:splat` still in it.
    to: Box<str>,
    pub status: StatusCode,
    /// `!`: applies even when a file answers the path.
    pub force: bool,
}

impl Redirect {
    /// The target for a request path, if the rule matches it.
    pub fn target(&self, path: &str) -> Option<String> {
        let captures = self.from.matches(path)?;
        let mut out = String::with_capacity(self.to.len() + path.len());
        let mut rest: &str = &self.to;
        while let Some(at) = rest.find(':') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let name_len = after
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            match captures.get(&after[..name_len]).filter(|_| name_len > 0) {
                Some(value) => out.push_str(value),
                None => {
                    out.push(':');
                    out.push_str(&after[..name_len]);
                }
            }
            rest = &after[name_len..];
        }
        out.push_str(rest);
        Some(out)
    }

    /// A rewrite (200 or 404) names a file of the site; a redirect may name any URL.
    pub fn is_rewrite(&self) -> bool {
        matches!(self.status, StatusCode::OK | StatusCode::NOT_FOUND)
    }
}

/// One `_headers` block: a pattern and the headers its responses get.
#[derive(Debug, Clone)]
pub struct HeaderRule {
    pattern: Pattern,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl HeaderRule {
    pub fn applies_to(&self, path: &str) -> bool {
        self.pattern.matches(path).is_some()
    }
}

/// Parses `_redirects`; lines it cannot honour are skipped with a warning.
pub fn parse_redirects(text: &str) -> Vec<Redirect> {
    let mut rules = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match parse_redirect(line) {
            Some(rule) if rules.len() < MAX_RULES => rules.push(rule),
            Some(_) => {
                tracing::warn!("_redirects: more than {MAX_RULES} rules; the rest are ignored");
                break;
            }
            None => tracing::warn!(
                line = number + 1,
                text = line,
                "_redirects: a line Slipway cannot apply is ignored"
            ),
        }
    }
    rules
}

fn parse_redirect(line: &str) -> Option<Redirect> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (from, to) = (fields.first()?, fields.get(1)?);
    let (status, force) = match fields.get(2) {
        None => (StatusCode::MOVED_PERMANENTLY, false),
        Some(code) => {
            let (digits, force) = match code.strip_suffix('!') {
                Some(digits) => (digits, true),
                None => (*code, false),
            };
            (StatusCode::from_u16(digits.parse().ok()?).ok()?, force)
        }
    };
    // Query, country and language conditions are not supported.
    if fields.len() > 3 || from.contains('?') {
        return None;
    }
    let allowed = [200, 301, 302, 303, 307, 308, 404];
    if !allowed.contains(&status.as_u16()) {
        return None;
    }
    let rule = Redirect {
        from: Pattern::parse(from)?,
        to: (*to).into(),
        status,
        force,
    };
    // A rewrite to another host would be a proxy: not supported.
    if rule.is_rewrite() && !to.starts_with('/') {
        return None;
    }
    if !to.starts_with('/') && !to.starts_with("https://") && !to.starts_with("http://") {
        return None;
    }
    Some(rule)
}

/// Headers a site may not set: framing and transport are the server's.
fn forbidden(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "upgrade"
            | "content-encoding"
            | "content-range"
            | "te"
            | "trailer"
            | "proxy-connection"
    )
}

/// Parses `_headers`: a pattern line, then indented `Name: value` lines.
pub fn parse_headers(text: &str) -> Vec<HeaderRule> {
    let mut rules: Vec<HeaderRule> = Vec::new();
    let mut current: Option<HeaderRule> = None;
    for (number, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let indented = raw.starts_with(' ') || raw.starts_with('\t');
        if !indented {
            rules.extend(current.take().filter(|rule| !rule.headers.is_empty()));
            current = Pattern::parse(line).map(|pattern| HeaderRule {
                pattern,
                headers: Vec::new(),
            });
            if current.is_none() {
                tracing::warn!(
                    line = number + 1,
                    text = line,
                    "_headers: a path Slipway cannot match is ignored"
                );
            }
            continue;
        }
        let Some(rule) = current.as_mut() else {
            continue;
        };
        let parsed = line.split_once(':').and_then(|(name, value)| {
            let name = HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
            let value = HeaderValue::from_str(value.trim()).ok()?;
            (!forbidden(&name)).then_some((name, value))
        });
        match parsed {
            Some(header) => rule.headers.push(header),
            None => tracing::warn!(
                line = number + 1,
                text = line,
                "_headers: a header Slipway cannot set is ignored"
            ),
        }
        if rules.len() >= MAX_RULES {
            break;
        }
    }
    rules.extend(current.filter(|rule| !rule.headers.is_empty()));
    rules.truncate(MAX_RULES);
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> Pattern {
        Pattern::parse(text).unwrap()
    }

    #[test]
    fn patterns_match_literals_placeholders_and_splats() {
        assert!(pattern("/about").matches("/about").is_some());
        assert!(pattern("/about").matches("/about/").is_some());
        assert!(pattern("/about").matches("/about/x").is_none());
        assert!(pattern("/about").matches("/abou").is_none());
        let blog = pattern("/blog/:year/:slug");
        let captured = blog.matches("/blog/2024/hello").unwrap();
        assert_eq!(captured.get("year"), Some("2024"));
        assert_eq!(captured.get("slug"), Some("hello"));
        assert!(blog.matches("/blog/2024").is_none());
        let splat = pattern("/docs/*");
        assert_eq!(
            splat.matches("/docs/a/b/c").unwrap().get("splat"),
            Some("a/b/c")
        );
        assert_eq!(splat.matches("/docs/").unwrap().get("splat"), Some(""));
        assert_eq!(splat.matches("/docs").unwrap().get("splat"), Some(""));
        assert!(splat.matches("/doc").is_none());
        assert!(pattern("/*").matches("/anything/at/all").is_some());
        assert!(Pattern::parse("no-slash").is_none());
        assert!(Pattern::parse("/a/*/b").is_none());
    }

    #[test]
    fn redirects_parse_and_substitute() {
        let rules = parse_redirects(
            "# comment\n\
             /old            /new\n\
             /blog/:year/:slug  /posts/:slug?y=:year  302\n\
             /docs/*          https://docs.example.com/:splat  308\n\
             /app/*           /index.html   200\n\
             /forced          /elsewhere    301!\n\
             /q?x=1           /nope\n\
             /proxy/*         https://api.example.com/:splat 200\n\
             /bad             /x   418\n",
        );
        assert_eq!(rules.len(), 5, "the query, proxy and 418 lines are skipped");
        assert_eq!(rules[0].status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(rules[0].target("/old").as_deref(), Some("/new"));
        assert_eq!(
            rules[1].target("/blog/2024/hi").as_deref(),
            Some("/posts/hi?y=2024")
        );
        assert_eq!(
            rules[2].target("/docs/a/b").as_deref(),
            Some("https://docs.example.com/a/b")
        );
        assert!(rules[3].is_rewrite());
        assert!(rules[4].force && !rules[0].force);
    }

    #[test]
    fn headers_parse_by_block_and_refuse_transport_headers() {
        let rules = parse_headers(
            "/*\n  X-Frame-Options: DENY\n  Content-Length: 5\n\n/assets/*\n\tCache-Control: public, max-age=31536000, immutable\n  Bad Header: x\n",
        );
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].headers.len(), 1, "content-length is the server's");
        assert!(rules[0].applies_to("/anything"));
        assert!(rules[1].applies_to("/assets/app.js"));
        assert!(!rules[1].applies_to("/index.html"));
        assert_eq!(rules[1].headers[0].0, http::header::CACHE_CONTROL);
    }
}
