//! The preview name of a branch: the `<name>` of a preview's host `<name>--<slug>`.
//! `autodeploy` names branch previews with it, and the API the preview a deploy hook builds.

/// The preview name of a branch: lowercased, every run of other characters than `a-z0-9`
/// turned into one `-`, trimmed, and cut (with a 6-character hash of the branch) so that
/// `<name>--<slug>` stays a DNS label (≤ 63). `None` when the slug leaves no room.
pub fn preview_name(branch: &str, slug: &str) -> Option<String> {
    let mut name = String::with_capacity(branch.len());
    for c in branch.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_matches('-');
    let room = 63usize.checked_sub(slug.len() + 2)?;
    let hash = &crate::ids::sha256_hex(branch.as_bytes())[..6];
    if !name.is_empty() && name.len() <= room {
        return Some(name.to_owned());
    }
    if room < 7 {
        return (room >= 6).then(|| hash.to_owned());
    }
    let cut = name[..name.len().min(room - 7)].trim_end_matches('-');
    Some(match cut.is_empty() {
        true => hash.to_owned(),
        false => format!("{cut}-{hash}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_names_are_dns_labels() {
        assert_eq!(
            preview_name("feature/Login_Page", "web").as_deref(),
            Some("feature-login-page")
        );
        assert_eq!(preview_name("--x--", "web").as_deref(), Some("x"));
        let long = "a".repeat(80);
        let name = preview_name(&long, "my-web-app").unwrap();
        assert!(name.len() + 2 + "my-web-app".len() <= 63, "{name}");
        assert!(name.starts_with("aaaa") && name.len() > 7);
        assert_ne!(
            preview_name(&format!("{long}1"), "web"),
            preview_name(&format!("{long}2"), "web"),
            "the hash keeps long names apart"
        );
        assert_eq!(preview_name("ü", "web").unwrap().len(), 6);
        assert_eq!(preview_name("x", &"s".repeat(60)).as_deref(), Some("x"));
        assert_eq!(preview_name("xy", &"s".repeat(60)), None);
    }
}
