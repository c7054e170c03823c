//! Whether a signed push moves its branch forward (issue 31, item 11). A provider's signature
//! covers the body, not the moment it was sent, and the delivery id header is neither signed
//! nor always there: a captured push stays valid forever. So a push is acted on only when it
//! follows what the project last accepted from that branch; a replayed older push, or one
//! whose commit was the branch's head before, starts nothing. Pure: `autodeploy` reads and
//! writes the [`BranchHead`] in one store transaction around [`judge`].

use serde_json::Value;

pub use crate::store::git::BranchHead;

/// Superseded heads remembered per branch.
pub const SUPERSEDED_KEPT: usize = 200;

/// What a signed push says about its branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushFacts {
    /// The branch's head before the push (`before`; all zeros for a new branch).
    pub before: Option<String>,
    /// The pushed commit (`after`).
    pub after: String,
    /// The pushed commit's time (Unix ms), from `head_commit` or the `commits` entry of `after`.
    pub committed_ms: Option<u64>,
}

/// [`judge`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Act on the push; store this as the branch's head.
    Forward(BranchHead),
    /// Start nothing, for this reason.
    Stale(String),
}

/// Decides whether `push` moves `branch` forward from `known` (what was last accepted).
///
/// In order: the first push seen for a branch is accepted; a push of the current head or of
/// any earlier head is stale (to go back to an older commit, roll back through the API or
/// push a new commit); a push whose `before` is the current head is accepted (force pushes
/// included); otherwise deliveries were missed in between, and the push is accepted only if
/// its commit is newer than the current head's by the payloads' commit times.
pub fn judge(known: Option<&BranchHead>, branch: &str, push: &PushFacts, now_ms: u64) -> Verdict {
    let forward = |superseded: Vec<String>| {
        Verdict::Forward(BranchHead {
            v: 1,
            head: push.after.clone(),
            committed_ms: push.committed_ms,
            superseded,
            updated_ms: now_ms,
        })
    };
    let Some(known) = known else {
        return forward(Vec::new());
    };
    let short = |sha: &str| sha.chars().take(12).collect::<String>();
    if push.after == known.head {
        return Verdict::Stale(format!(
            "stale push: {} is already the head of {branch} (a replay or a late redelivery)",
            short(&push.after)
        ));
    }
    if known.superseded.contains(&push.after) {
        return Verdict::Stale(format!(
            "stale push: {} was the head of {branch} before {}; pushes never move a branch back \
             (roll back through POST /api/projects/{{projectId}}/rollback, or push a new commit)",
            short(&push.after),
            short(&known.head)
        ));
    }
    let follows = push.before.as_deref() == Some(known.head.as_str());
    let newer = matches!(
        (push.committed_ms, known.committed_ms),
        (Some(pushed), Some(head)) if pushed > head
    );
    if !follows && !newer {
        return Verdict::Stale(format!(
            "stale push: it does not follow {}, the last head of {branch} (its before is {}), \
             and its commit is not newer",
            short(&known.head),
            short(push.before.as_deref().unwrap_or("missing"))
        ));
    }
    let mut superseded = known.superseded.clone();
    superseded.push(known.head.clone());
    let excess = superseded.len().saturating_sub(SUPERSEDED_KEPT);
    superseded.drain(..excess);
    forward(superseded)
}

/// The time of the pushed commit: `head_commit.timestamp` (GitHub, Gitea, Forgejo) or the
/// `commits` entry whose id is `after` (GitLab, which lists the pushed commits).
pub fn commit_time(json: &Value, after: &str) -> Option<u64> {
    let head = json
        .pointer("/head_commit/timestamp")
        .and_then(Value::as_str);
    let listed = || {
        json.pointer("/commits")?
            .as_array()?
            .iter()
            .find(|commit| commit.pointer("/id").and_then(Value::as_str) == Some(after))?
            .pointer("/timestamp")?
            .as_str()
    };
    parse_time(head.or_else(listed)?)
}

/// An RFC 3339 time with a `Z` or `±HH:MM` offset (what providers send) → Unix ms.
pub fn parse_time(text: &str) -> Option<u64> {
    let (local, offset_s): (&str, i64) = match text.strip_suffix('Z') {
        Some(local) => (local, 0),
        None => {
            let (local, zone) = text.split_at(text.len().checked_sub(6)?);
            let sign = match zone.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (hours, minutes) = zone[1..].split_once(':')?;
            let seconds = hours.parse::<i64>().ok()? * 3600 + minutes.parse::<i64>().ok()? * 60;
            (local, sign * seconds)
        }
    };
    let time = humantime::parse_rfc3339_weak(local).ok()?;
    let local_ms = time.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64;
    u64::try_from(local_ms - offset_s * 1000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";
    const ZERO: &str = "0000000000000000000000000000000000000000";

    fn push(before: &str, after: &str, committed_ms: Option<u64>) -> PushFacts {
        PushFacts {
            before: Some(before.to_owned()),
            after: after.to_owned(),
            committed_ms,
        }
    }

    fn accept(known: Option<&BranchHead>, facts: &PushFacts) -> BranchHead {
        match judge(known, "main", facts, 5) {
            Verdict::Forward(head) => head,
            Verdict::Stale(reason) => panic!("refused: {reason}"),
        }
    }

    fn refused(known: &BranchHead, facts: &PushFacts) -> String {
        match judge(Some(known), "main", facts, 5) {
            Verdict::Forward(head) => panic!("accepted: {head:?}"),
            Verdict::Stale(reason) => reason,
        }
    }

    #[test]
    fn a_branch_moves_forward_and_never_back() {
        let first = accept(None, &push(ZERO, A, Some(1000)));
        assert_eq!((first.head.as_str(), first.superseded.len()), (A, 0));
        let second = accept(Some(&first), &push(A, B, Some(2000)));
        assert_eq!(second.superseded, vec![A.to_owned()]);
        // Replays: the head itself, and the older push (its `before` is not the head).
        assert!(refused(&second, &push(A, B, Some(2000))).contains("already the head"));
        assert!(refused(&second, &push(ZERO, A, Some(1000))).contains("never move a branch back"));
        // A force push back to an old commit, even from the head, is refused too.
        assert!(refused(&second, &push(B, A, Some(9000))).contains("never move a branch back"));
        // A force push from the head to a new commit moves forward, whatever its time.
        let forced = accept(Some(&second), &push(B, C, Some(10)));
        assert_eq!(forced.superseded, vec![A.to_owned(), B.to_owned()]);
    }

    #[test]
    fn missed_deliveries_fall_back_to_commit_times() {
        let known = accept(None, &push(ZERO, A, Some(1000)));
        // B's delivery was missed; C follows B, not A.
        assert_eq!(accept(Some(&known), &push(B, C, Some(3000))).head, C);
        let reason = refused(&known, &push(B, C, Some(1000)));
        assert!(reason.contains("not newer"), "{reason}");
        assert!(refused(&known, &push(B, C, None)).contains("not newer"));
        let no_time = accept(None, &push(ZERO, A, None));
        assert!(refused(&no_time, &push(B, C, Some(3000))).contains("not newer"));
    }

    #[test]
    fn superseded_heads_are_bounded() {
        let mut head = accept(None, &push(ZERO, "0", None));
        for n in 1..=(SUPERSEDED_KEPT + 5) {
            head = accept(Some(&head), &push(&head.head.clone(), &n.to_string(), None));
        }
        assert_eq!(head.superseded.len(), SUPERSEDED_KEPT);
        assert_eq!(head.superseded[0], "5");
    }

    #[test]
    fn provider_times_parse_with_their_offsets() {
        assert_eq!(parse_time("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(parse_time("1970-01-01T01:00:01+01:00"), Some(1000));
        assert_eq!(parse_time("1970-01-01T00:00:01-01:00"), Some(3_601_000));
        assert_eq!(
            parse_time("2026-11-24T20:00:00+00:00"),
            parse_time("2026-11-24T21:30:00+01:30")
        );
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(parse_time("2026-11-24T20:00:00+0100"), None);
    }
}
