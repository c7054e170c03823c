//! The rules a custom domain name follows (the contract's "Custom domains"), as one pure
//! function: the name a user typed → the name stored (lowercase, IDNA in punycode, no
//! trailing dot) or the reason it is refused. Unicode names go through UTS 46 (the `idna`
//! crate, the mapping browsers use), so `Bücher.Example` and `xn--bcher-kva.example` are the
//! same domain.

/// The longest DNS name (RFC 1035, without the trailing dot).
pub const MAX_NAME_LEN: usize = 253;
/// The longest label.
pub const MAX_LABEL_LEN: usize = 63;

/// Why a name cannot be a custom domain (each a sentence for the error message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("field `domain` must not be empty")]
    Empty,
    #[error("{0:?} is not a valid domain name: {1}")]
    Invalid(String, &'static str),
    #[error("{0:?} is an IP address; a custom domain is a DNS name (such as www.example.com)")]
    IpLiteral(String),
    #[error("{0:?} needs at least two labels (such as example.com)")]
    SingleLabel(String),
    #[error("{0:?} is the control host; it cannot be a project's domain")]
    ControlHost(String),
    #[error("{0:?} is under the apps domain {1:?}, whose names belong to project slugs; use the project's slug host instead")]
    UnderAppsDomain(String, String),
}

/// Normalizes and checks `input` against the contract's rules. `apps_domain` and
/// `control_host` are the daemon's own names.
pub fn normalize(input: &str, apps_domain: &str, control_host: &str) -> Result<String, NameError> {
    let trimmed = input.trim();
    let trimmed = trimmed.strip_suffix('.').unwrap_or(trimmed);
    if trimmed.is_empty() {
        return Err(NameError::Empty);
    }
    let invalid = |why| NameError::Invalid(input.to_owned(), why);
    if trimmed.starts_with('[') || trimmed.parse::<std::net::IpAddr>().is_ok() {
        return Err(NameError::IpLiteral(input.to_owned()));
    }
    if trimmed
        .chars()
        .any(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
    {
        return Err(invalid(
            "only letters, digits, hyphens and dots are allowed (no scheme, port, path or wildcard)",
        ));
    }
    let name = idna::domain_to_ascii_strict(trimmed)
        .map_err(|_| invalid("it is not a valid internationalized domain name"))?;
    if name.len() > MAX_NAME_LEN {
        return Err(invalid("longer than 253 characters"));
    }
    let labels: Vec<&str> = name.split('.').collect();
    for label in &labels {
        if label.is_empty() {
            return Err(invalid("it has an empty label (two dots in a row)"));
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(invalid("a label is longer than 63 characters"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid("a label starts or ends with a hyphen"));
        }
    }
    if labels.len() < 2 {
        return Err(NameError::SingleLabel(input.to_owned()));
    }
    if labels
        .last()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(NameError::IpLiteral(input.to_owned()));
    }
    if name == control_host {
        return Err(NameError::ControlHost(input.to_owned()));
    }
    if name == apps_domain || name.ends_with(&format!(".{apps_domain}")) {
        return Err(NameError::UnderAppsDomain(
            input.to_owned(),
            apps_domain.to_owned(),
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str) -> Result<String, NameError> {
        normalize(input, "apps.example.com", "slipway.example.com")
    }

    #[test]
    fn valid_names_are_normalized() {
        let cases = [
            ("www.example.com", "www.example.com"),
            ("WWW.Example.COM", "www.example.com"),
            ("example.com.", "example.com"),
            ("  shop.example.co.uk ", "shop.example.co.uk"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("BÜCHER.example", "xn--bcher-kva.example"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("a-b.c-d.example", "a-b.c-d.example"),
            ("example.com.au", "example.com.au"),
            // Names next to the daemon's own are fine.
            ("apps.example.org", "apps.example.org"),
            ("myapps.example.com", "myapps.example.com"),
        ];
        for (input, stored) in cases {
            assert_eq!(check(input).as_deref(), Ok(stored), "{input}");
        }
        let longest_label = format!("{}.example", "a".repeat(63));
        assert!(check(&longest_label).is_ok());
        let long_name = format!("{}example", "abcdefghi.".repeat(24));
        assert_eq!(long_name.len(), 247);
        assert!(check(&long_name).is_ok());
    }

    #[test]
    fn every_invalid_case_of_the_contract_is_refused() {
        let invalid = [
            "",
            ".",
            "localhost",
            "com",
            "127.0.0.1",
            "10.1.2.3",
            "[::1]",
            "::1",
            "1.2.3.4.5",
            "slipway.example.com",
            "apps.example.com",
            "myapp.apps.example.com",
            "a.b.apps.example.com",
            "https://www.example.com",
            "www.example.com:443",
            "www.example.com/path",
            "*.example.com",
            "exa mple.com",
            "example..com",
            "-example.com",
            "example-.com",
            "under_score.example.com",
        ];
        for input in invalid {
            assert!(check(input).is_err(), "{input:?} was accepted");
        }
        assert!(check(&format!("{}.example", "a".repeat(64))).is_err());
        assert!(check(&format!("{}example.com", "abcdefghi.".repeat(25))).is_err());
        assert!(matches!(check("127.0.0.1"), Err(NameError::IpLiteral(_))));
        assert!(matches!(check("com"), Err(NameError::SingleLabel(_))));
        assert!(matches!(
            check("x.apps.example.com"),
            Err(NameError::UnderAppsDomain(..))
        ));
        assert!(matches!(
            check("slipway.example.com"),
            Err(NameError::ControlHost(_))
        ));
    }
}
