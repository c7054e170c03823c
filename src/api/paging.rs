//! Pages of every list: `?limit=` (1–1000, default 100) and `?cursor=` in, `nextCursor` out
//! (null on the last page). A cursor names the last item of the previous page by its sort key
//! (creation time and id), so items created or deleted meanwhile neither repeat nor shift a
//! page. Used by the list handlers; the query shape is [`PageQuery`].

use super::error::ApiError;
use crate::error_code::ErrorCode;

pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

/// A parsed page request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: usize,
    after: Option<(u64, String)>,
}

/// Parses `limit` and `cursor`; anything else (or a bad value) is `INVALID_QUERY`.
pub fn parse(query: Option<&str>) -> Result<PageRequest, ApiError> {
    let mut page = PageRequest {
        limit: DEFAULT_LIMIT,
        after: None,
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "limit" => {
                page.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::InvalidQuery,
                            format!("limit={value:?} must be an integer from 1 to {MAX_LIMIT}"),
                        )
                    })?
            }
            "cursor" => {
                page.after = Some(decode_cursor(value).ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidQuery,
                        format!("cursor={value:?} is not a cursor this API gave out (use nextCursor as it is)"),
                    )
                })?)
            }
            other => {
                return Err(ApiError::new(
                    ErrorCode::InvalidQuery,
                    format!("unknown query parameter {other:?}; use limit, cursor (and projectId for the audit log)"),
                ))
            }
        }
    }
    Ok(page)
}

/// The order of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    OldestFirst,
    NewestFirst,
}

/// One page of `items` in `order` of `key` (creation time, id), and the cursor of the next.
pub fn paginate<T>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> (u64, String),
    order: Order,
    page: &PageRequest,
) -> (Vec<T>, Option<String>) {
    items.sort_by_key(|item| key(item));
    if order == Order::NewestFirst {
        items.reverse();
    }
    let start = match &page.after {
        None => 0,
        Some(after) => items
            .iter()
            .position(|item| match order {
                Order::OldestFirst => key(item) > *after,
                Order::NewestFirst => key(item) < *after,
            })
            .unwrap_or(items.len()),
    };
    let end = (start + page.limit).min(items.len());
    let next = (end < items.len()).then(|| encode_cursor(&key(&items[end - 1])));
    let page: Vec<T> = items.drain(start..end).collect();
    (page, next)
}

fn encode_cursor((ms, id): &(u64, String)) -> String {
    cursor_of(*ms, id)
}

/// The cursor of an item with this sort key.
pub fn cursor_of(ms: u64, id: &str) -> String {
    format!("{ms}.{id}")
}

impl PageRequest {
    /// The id of the last item of the previous page, if any.
    pub fn after_id(&self) -> Option<&str> {
        self.after.as_ref().map(|(_, id)| id.as_str())
    }
}

fn decode_cursor(cursor: &str) -> Option<(u64, String)> {
    let (ms, id) = cursor.split_once('.')?;
    let valid_id = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    valid_id.then(|| Some((ms.parse().ok()?, id.to_owned())))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_every_item_once_in_both_orders() {
        let items: Vec<(u64, String)> = (0..250).map(|i| (i / 3, format!("prj_{i:03}"))).collect();
        for order in [Order::OldestFirst, Order::NewestFirst] {
            let mut seen = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let query = match &cursor {
                    Some(c) => format!("limit=7&cursor={c}"),
                    None => "limit=7".into(),
                };
                let request = parse(Some(&query)).unwrap();
                let (page, next) = paginate(items.clone(), |i| i.clone(), order, &request);
                assert!(page.len() <= 7);
                seen.extend(page);
                match next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(seen.len(), 250, "{order:?}");
            let unique: std::collections::BTreeSet<_> = seen.iter().collect();
            assert_eq!(unique.len(), 250, "{order:?}: an item came twice");
        }
    }

    #[test]
    fn bad_queries_are_refused() {
        for bad in [
            "limit=0",
            "limit=1001",
            "limit=x",
            "cursor=nope",
            "cursor=1.a/b",
            "page=2",
        ] {
            let error = parse(Some(bad)).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidQuery, "{bad}");
        }
        assert_eq!(parse(None).unwrap().limit, DEFAULT_LIMIT);
    }
}
