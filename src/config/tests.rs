//! Config parsing: defaults, refusals naming the key, advice.
use super::*;

#[test]
fn dev_defaults_need_nothing() {
    let config = Config::from_toml("", true).unwrap();
    assert_eq!(config.apps_domain, "localhost");
    assert_eq!(config.control_host, "slipway.localhost");
    assert_eq!(
        config.advice().len(),
        1,
        "the default control host is a sibling of apps"
    );
    assert_eq!(config.http_listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.tls.mode, TlsMode::Internal);
    assert_eq!(config.sandbox.mode, SandboxMode::Auto);
    assert_eq!(config.reserved_slug(), "slipway");
    // Custom domains on reserved names work in --dev without a TXT record or any set-up.
    assert_eq!(config.domains.trusted_suffixes, ["localhost", "test"]);
    assert_eq!(config.tls.internal_domain_suffixes, ["localhost", "test"]);
    assert_eq!(config.domains.nameserver, None);
    let production = Config::from_toml("apps_domain = \"a.example\"", false).unwrap();
    assert!(production.domains.trusted_suffixes.is_empty());
    assert!(production.tls.internal_domain_suffixes.is_empty());
    assert_eq!(production.tls.acme_orders_per_project_per_hour, 10);
}

#[test]
fn production_requires_apps_domain() {
    let error = Config::from_toml("", false).unwrap_err();
    assert!(error.to_string().contains("apps_domain"), "{error}");
}

#[test]
fn unknown_keys_are_named() {
    let error = Config::from_toml("apps_domain = \"a.b\"\nhttp_lisen = \"x\"", false).unwrap_err();
    assert!(error.to_string().contains("http_lisen"), "{error}");
    let error = Config::from_toml("[limits]\npid = 3", true).unwrap_err();
    assert!(error.to_string().contains("pid"), "{error}");
}

#[test]
fn invalid_values_are_named() {
    for (text, key) in [
        ("[tls]\nmode = \"acm\"", "tls.mode"),
        ("http_listen = \"localhost\"", "http_listen"),
        ("[sandbox]\nsubnet = \"10.0.0.0/30\"", "sandbox.subnet"),
        ("[sandbox]\ninstance = \"Bad-Name\"", "sandbox.instance"),
        ("[limits]\npids = 0", "limits.pids"),
        ("[limits]\napp_cpus = 0.0", "limits.app_cpus"),
        (
            "[limits]\nproxy_response_timeout_s = 0",
            "limits.proxy_response_timeout_s",
        ),
    ] {
        let error = Config::from_toml(text, true).unwrap_err();
        assert!(error.to_string().contains(key), "{text}: {error}");
    }
}

#[test]
fn limits_left_out_get_their_defaults_and_a_zero_reserve_is_allowed() {
    let config =
        Config::from_toml("[limits]\napp_memory_mb = 256\ndisk_reserve_mb = 0", true).unwrap();
    assert_eq!(config.limits.app_memory_mb, 256);
    assert_eq!(config.limits.disk_reserve_mb, 0);
    assert_eq!(config.limits.build_memory_mb, 1024);
    assert_eq!(config.limits.proxy_connect_timeout_s, 3);
    assert!(config.limits.router_threads >= 1);
}

#[test]
fn a_control_host_inside_apps_domain_gets_advice() {
    let inside = Config::from_toml("apps_domain = \"apps.example.com\"", false).unwrap();
    let advice = inside.advice();
    assert_eq!(advice.len(), 1);
    assert!(advice[0].contains("Public Suffix List"), "{advice:?}");
    let outside = Config::from_toml(
        "apps_domain = \"apps.example.com\"\ncontrol_host = \"slipway.example.com\"",
        false,
    )
    .unwrap();
    assert!(outside.advice().is_empty());
}

#[test]
fn smtp_from_sandboxes_is_off_unless_allowed() {
    let config = Config::from_toml("", true).unwrap();
    assert!(!config.sandbox.allow_smtp);
    let config = Config::from_toml("[sandbox]\nallow_smtp = true", true).unwrap();
    assert!(config.sandbox.allow_smtp);
}

#[test]
fn previews_sleep_only_when_the_operator_says_so() {
    let config = Config::from_toml("", true).unwrap();
    assert_eq!(config.sleep.previews, None);
    let config = Config::from_toml(
        "[sleep]\npreviews_idle_timeout_s = 1800\npreviews_strategy = \"page\"",
        true,
    )
    .unwrap();
    let previews = config.sleep.previews.unwrap();
    assert_eq!(previews.idle_timeout_s, 1800);
    assert_eq!(previews.strategy, crate::router::SleepStrategy::Page);
    let error = Config::from_toml("[sleep]\npreviews_idle_timeout_s = 1", true).unwrap_err();
    assert!(
        error.to_string().contains("previews_idle_timeout_s"),
        "{error}"
    );
}
