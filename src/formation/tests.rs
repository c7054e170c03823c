use std::collections::BTreeMap;

use super::*;

fn commands(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(n, c)| (n.to_string(), c.to_string()))
        .collect()
}

const DEFAULTS: Defaults = Defaults {
    memory_mb: 512,
    cpus: 1.0,
};

#[test]
fn procfiles_parse_into_types() {
    let text = "# processes\nweb: node server.js\n\nworker:  node worker.js --queue=a:b\nrelease: npm run migrate\n";
    let types = parse_procfile(text).unwrap();
    assert_eq!(
        types,
        commands(&[
            ("release", "npm run migrate"),
            ("web", "node server.js"),
            ("worker", "node worker.js --queue=a:b"),
        ])
    );
    for (bad, line) in [
        ("web node server.js", 1),
        ("web: a\nWeb: b", 2),
        ("web: a\nweb: b", 2),
        ("worker:", 1),
        ("9lives: x", 1),
    ] {
        let error = parse_procfile(bad).unwrap_err();
        assert_eq!(error.line, line, "{bad}: {error}");
    }
}

#[test]
fn unset_settings_take_the_defaults_and_web_overlaps() {
    let stored = StoredFormation::default().with(&BTreeMap::from([(
        "worker".to_string(),
        StoredType {
            instances: Some(3),
            memory_mb: Some(256),
            ..StoredType::default()
        },
    )]));
    let types = stored.resolve(&commands(&[("web", "w"), ("worker", "q")]), DEFAULTS);
    assert_eq!(types[0].name, "web");
    assert_eq!((types[0].instances, types[0].memory_mb), (1, 512));
    assert_eq!(types[0].deploy, DeployStrategy::Overlap);
    assert_eq!((types[1].instances, types[1].memory_mb), (3, 256));
    assert_eq!(types[1].deploy, DeployStrategy::Replace);
    assert_eq!(types[1].memory_total_mb(), 768);
    // A later change keeps what it does not name.
    let next = stored.with(&BTreeMap::from([(
        "worker".to_string(),
        StoredType {
            instances: Some(0),
            ..StoredType::default()
        },
    )]));
    assert_eq!(next.types["worker"].memory_mb, Some(256));
    assert_eq!(next.types["worker"].instances, Some(0));
}

#[test]
fn changes_are_checked() {
    let known = commands(&[("web", "w"), ("worker", "q")]);
    let change = |name: &str, fields: StoredType| BTreeMap::from([(name.to_string(), fields)]);
    assert!(check_change(
        &change(
            "web",
            StoredType {
                instances: Some(2),
                ..Default::default()
            }
        ),
        &known
    )
    .is_ok());
    assert!(matches!(
        check_change(&BTreeMap::new(), &known),
        Err(ChangeError::Invalid(_))
    ));
    assert!(matches!(
        check_change(&change("web", StoredType { instances: Some(MAX_INSTANCES + 1), ..Default::default() }), &known),
        Err(ChangeError::Invalid(m)) if m.contains("web.instances")
    ));
    assert!(matches!(
        check_change(
            &change(
                "web",
                StoredType {
                    memory_mb: Some(1),
                    ..Default::default()
                }
            ),
            &known
        ),
        Err(ChangeError::Invalid(_))
    ));
    assert!(matches!(
        check_change(
            &change(
                "web",
                StoredType {
                    cpus: Some(f64::NAN),
                    ..Default::default()
                }
            ),
            &known
        ),
        Err(ChangeError::Invalid(_))
    ));
    assert!(matches!(
        check_change(&change("clock", StoredType { instances: Some(1), ..Default::default() }), &known),
        Err(ChangeError::UnknownType(m)) if m.contains("web, worker")
    ));
}

#[test]
fn instance_keys_round_trip_and_old_records_are_web_1() {
    let id = InstanceId::new("worker", 2);
    assert_eq!(id.to_string(), "worker.2");
    let key = instance_key("dpl_abc", &id);
    assert_eq!(split_instance_key(&key), Some(("dpl_abc", id)));
    assert_eq!(
        split_instance_key("dpl_abc"),
        Some(("dpl_abc", InstanceId::new("web", 1)))
    );
    assert_eq!(InstanceId::parse("web.0"), None);
    assert_eq!(InstanceId::parse("Web.1"), None);
}

#[test]
fn admission_says_what_is_asked_and_free() {
    let admission = Admission {
        total_mb: 4096,
        reserve_mb: 1024,
        held_mb: 2048,
    };
    assert_eq!(admission.free_mb(), 1024);
    assert!(admission.admit(1024, "web=2 × 512 MiB").is_ok());
    let refused = admission.admit(1536, "web=3 × 512 MiB").unwrap_err();
    assert!(
        refused.contains("asks 1536 MiB, 1024 MiB is free"),
        "{refused}"
    );
    assert!(host_memory_mb().unwrap_or(1) > 0);
}
