//! A route's path parameters, captured from its template.

/// Path parameters captured by a template, in order.
pub struct Params(Vec<String>);

impl Params {
    pub fn get(&self, index: usize) -> &str {
        &self.0[index]
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Matches `path` against `template`; returns the captured (percent-decoded) parameters.
pub fn match_template(template: &str, path: &str) -> Option<Params> {
    let mut template_parts = template.split('/');
    let mut path_parts = path.split('/');
    let mut params = Vec::new();
    loop {
        match (template_parts.next(), path_parts.next()) {
            (None, None) => return Some(Params(params)),
            (Some(t), Some(p)) if t.starts_with('{') => {
                if p.is_empty() {
                    return None;
                }
                params
                    .push(String::from_utf8(crate::http_util::percent_decode(p.as_bytes())?).ok()?);
            }
            (Some(t), Some(p)) if t == p => {}
            _ => return None,
        }
    }
}
