//! The route table: host resolution, custom domains, counters, concurrent writers, and the
//! instances of proxied targets.

use super::*;
use crate::upstreams::{Affinity, FIRST_WEB_INSTANCE};

#[test]
fn hosts_resolve() {
    assert_eq!(host_without_port("a.localhost:8080"), "a.localhost");
    assert_eq!(host_without_port("a.localhost."), "a.localhost");
    assert_eq!(host_without_port("a.localhost"), "a.localhost");
    assert_eq!(app_slug("my-app.localhost", "localhost"), Some("my-app"));
    assert_eq!(app_slug("x.my-app.localhost", "localhost"), None);
    assert_eq!(app_slug("localhost", "localhost"), None);
    assert_eq!(app_slug("evil-localhost", "localhost"), None);
    let routes = Routes::new("slipway.localhost".into(), "localhost".into());
    assert!(matches!(
        routes.resolve("slipway.localhost:8080"),
        Destination::Control
    ));
    assert!(matches!(
        routes.resolve("nope.localhost"),
        Destination::Unknown
    ));
    routes.add_project("web");
    assert!(matches!(
        routes.resolve("web.localhost"),
        Destination::App {
            target: None,
            metrics: Some(_),
            ..
        }
    ));
}

/// A custom domain serves its project like the slug host, or redirects; it goes with its
/// project, and names under the apps domain never reach the custom table.
#[test]
fn custom_domains_serve_or_redirect_and_go_with_their_project() {
    let routes = Routes::new("slipway.localhost".into(), "localhost".into());
    routes.add_project("web");
    let serve = |slug: &str| CustomHost {
        slug: slug.into(),
        redirect_to: None,
    };
    routes.add_domains(&[
        ("www.example.test".into(), serve("web")),
        (
            "example.test".into(),
            CustomHost {
                slug: "web".into(),
                redirect_to: Some("www.example.test".into()),
            },
        ),
        ("orphan.example.test".into(), serve("gone")),
    ]);
    match routes.resolve("www.example.test:8443") {
        Destination::App { slug, .. } => assert_eq!(slug, "web"),
        _ => panic!("www.example.test does not serve web"),
    }
    assert!(matches!(
        routes.resolve("example.test."),
        Destination::Redirect { to } if to == "www.example.test"
    ));
    assert!(matches!(
        routes.resolve("orphan.example.test"),
        Destination::Unknown
    ));
    routes.remove_domain("www.example.test");
    assert!(matches!(
        routes.resolve("www.example.test"),
        Destination::Unknown
    ));
    routes.remove_project("web");
    let left: Vec<String> = routes.snapshot().domains.keys().cloned().collect();
    assert_eq!(left, ["orphan.example.test"]);
}

/// A project's counters live as long as the project: a new live deployment keeps them,
/// deletion drops them; with request metrics off, requests get none.
#[test]
fn metrics_follow_the_project_not_the_deployment() {
    let routes = Routes::new("slipway.localhost".into(), "localhost".into());
    routes.add_project("web");
    let counters = routes.metrics("web").unwrap();
    counters.record_response(200, std::time::Duration::from_millis(1));
    routes.set_live(
        "web",
        Some(Target::proxy(
            "dpl_1",
            [(FIRST_WEB_INSTANCE, None)],
            Affinity::None,
        )),
    );
    let Destination::App {
        metrics: Some(handed),
        ..
    } = routes.resolve("web.localhost")
    else {
        panic!("no counters for a request to web");
    };
    assert!(Arc::ptr_eq(&handed, &counters));
    assert_eq!(handed.snapshot().requests[1], 1);
    routes.remove_project("web");
    assert!(routes.metrics("web").is_none());
    let quiet =
        Routes::new("slipway.localhost".into(), "localhost".into()).with_request_metrics(false);
    quiet.add_project("web");
    assert!(matches!(
        quiet.resolve("web.localhost"),
        Destination::App { metrics: None, .. }
    ));
    assert!(quiet.metrics("web").is_some(), "restarts are still counted");
}

/// Many writers for different projects at once, each adding, switching and repointing its
/// own project: with a load-clone-store update, some of these changes were lost.
#[test]
fn concurrent_updates_for_different_projects_are_never_lost() {
    const WRITERS: usize = 16;
    const ROUNDS: usize = 200;
    let routes = Arc::new(Routes::new("slipway.localhost".into(), "localhost".into()));
    let threads: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let routes = routes.clone();
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let slug = format!("app-{writer}-{round}");
                    routes.add_project(&slug);
                    let upstream = SocketAddr::from(([127, 0, 0, 1], 1000 + round as u16));
                    routes.set_live(
                        &slug,
                        Some(Target::proxy(
                            format!("dpl-{writer}-{round}"),
                            [(FIRST_WEB_INSTANCE, Some(upstream))],
                            Affinity::None,
                        )),
                    );
                    let moved = SocketAddr::from(([127, 0, 0, 2], 2000 + round as u16));
                    let deployment = format!("dpl-{writer}-{round}");
                    routes.set_instance(&slug, &deployment, FIRST_WEB_INSTANCE, Some(moved));
                    if round % 2 == 1 {
                        routes.remove_project(&format!("app-{writer}-{}", round - 1));
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let table = routes.snapshot();
    assert_eq!(table.apps.len(), WRITERS * ROUNDS / 2);
    for writer in 0..WRITERS {
        for round in (1..ROUNDS).step_by(2) {
            let slug = format!("app-{writer}-{round}");
            match table.apps.get(&slug) {
                Some(Some(Target::Proxy {
                    upstreams,
                    deployment_id,
                })) => {
                    assert_eq!(deployment_id, &format!("dpl-{writer}-{round}"));
                    assert_eq!(
                        upstreams.instances()[0].address().map(|u| u.port()),
                        Some(2000 + round as u16),
                        "{slug} repoint lost"
                    );
                }
                _ => panic!("{slug}: its live switch was lost"),
            }
        }
    }
}

fn at(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The upstreams `host` resolves to.
fn upstreams_of(routes: &Routes, host: &str) -> crate::upstreams::Upstreams {
    match routes.resolve(host) {
        Destination::App {
            target: Some(Target::Proxy { upstreams, .. }),
            ..
        } => upstreams,
        _ => panic!("{host} is not proxied"),
    }
}

/// Names and ports of the instances, in order.
fn listing(upstreams: &crate::upstreams::Upstreams) -> Vec<(String, Option<u16>)> {
    upstreams
        .instances()
        .iter()
        .map(|instance| {
            let port = instance.address().map(|address| address.port());
            (instance.name().to_owned(), port)
        })
        .collect()
}

/// Requests in flight stay counted when the table changes: the instance in the next
/// snapshot has the same counter, whether another instance moved, this one did, the same
/// deployment went live again (a restore) or a preview label was repointed.
#[test]
fn loads_are_carried_across_snapshot_updates() {
    let routes = Routes::new("slipway.localhost".into(), "localhost".into());
    let two = [("web.1", at(1001)), ("web.2", at(1002))];
    routes.set_live("shop", Some(Target::proxy("dpl_1", two, Affinity::None)));
    let before = upstreams_of(&routes, "shop.localhost");
    let held = before.instances()[0].enter();
    routes.set_instance("shop", "dpl_1", "web.2", None);
    routes.set_instance("shop", "dpl_1", "web.2", at(2002));
    routes.set_instance("shop", "dpl_1", "web.1", at(2001));
    routes.set_instance("shop", "dpl_1", "web.3", at(2003));
    routes.set_live(
        "shop",
        Some(Target::proxy(
            "dpl_1",
            [("web.1", at(3001))],
            Affinity::None,
        )),
    );
    let after = upstreams_of(&routes, "shop.localhost");
    assert_eq!(listing(&after), [("web.1".to_owned(), Some(3001))]);
    assert_eq!(
        after.instances()[0].load(),
        1,
        "the request in flight is still counted"
    );
    drop(held);
    assert_eq!(after.instances()[0].load(), 0, "and taken off when it ends");
    // Another deployment's instances start from zero.
    let _held = after.instances()[0].enter();
    routes.set_live(
        "shop",
        Some(Target::proxy(
            "dpl_2",
            [("web.1", at(4001))],
            Affinity::None,
        )),
    );
    assert_eq!(
        upstreams_of(&routes, "shop.localhost").instances()[0].load(),
        0
    );
    // Previews too.
    routes.set_preview(
        "pr-1--shop",
        Some(Target::proxy("dpl_3", two, Affinity::None)),
    );
    let preview = upstreams_of(&routes, "pr-1--shop.localhost");
    let _in_preview = preview.instances()[1].enter();
    routes.set_instance("pr-1--shop", "dpl_3", "web.1", None);
    let preview = upstreams_of(&routes, "pr-1--shop.localhost");
    assert_eq!(preview.instances()[1].load(), 1);
}

/// A restart reported by the supervisor of a deployment that is no longer live changes
/// nothing, nor does one for a static or missing target.
#[test]
fn set_instance_for_a_deployment_no_longer_live_is_ignored() {
    let routes = Routes::new("slipway.localhost".into(), "localhost".into());
    routes.add_project("shop");
    routes.set_instance("shop", "dpl_1", "web.1", at(1));
    assert!(matches!(
        routes.resolve("shop.localhost"),
        Destination::App { target: None, .. }
    ));
    routes.set_live(
        "shop",
        Some(Target::proxy(
            "dpl_2",
            [("web.1", at(2001))],
            Affinity::None,
        )),
    );
    routes.set_instance("shop", "dpl_1", "web.1", None);
    routes.set_instance("shop", "dpl_1", "web.2", at(1002));
    routes.remove_instance("shop", "dpl_1", "web.1");
    routes.set_instance("nope", "dpl_2", "web.1", at(1));
    let upstreams = upstreams_of(&routes, "shop.localhost");
    assert_eq!(listing(&upstreams), [("web.1".to_owned(), Some(2001))]);
}

/// Instances come and go one by one; one out (restarting) leaves the others serving, and
/// only with none left do visitors get the "restarting" page.
#[test]
fn one_instance_out_leaves_the_others_serving() {
    let routes = Routes::new("slipway.localhost".into(), "localhost".into());
    routes.set_live(
        "shop",
        Some(Target::proxy(
            "dpl_1",
            [("web.1", at(1001))],
            Affinity::None,
        )),
    );
    routes.set_instance("shop", "dpl_1", "web.2", at(1002));
    routes.set_instance("shop", "dpl_1", "web.3", at(1003));
    routes.set_instance("shop", "dpl_1", "web.2", None);
    let upstreams = upstreams_of(&routes, "shop.localhost");
    assert_eq!(
        listing(&upstreams),
        [
            ("web.1".to_owned(), Some(1001)),
            ("web.2".to_owned(), None),
            ("web.3".to_owned(), Some(1003)),
        ]
    );
    assert!(upstreams.serving());
    let mut chosen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        chosen.insert(upstreams.pick().expect("an instance serves"));
    }
    assert_eq!(chosen.into_iter().collect::<Vec<_>>(), [0, 2]);
    routes.remove_instance("shop", "dpl_1", "web.3");
    routes.set_instance("shop", "dpl_1", "web.1", None);
    let upstreams = upstreams_of(&routes, "shop.localhost");
    assert_eq!(upstreams.instances().len(), 2);
    assert!(!upstreams.serving(), "the restarting page");
    routes.set_instance("shop", "dpl_1", "web.2", at(2002));
    assert_eq!(upstreams_of(&routes, "shop.localhost").pick(), Some(1));
}

/// Affinity cookies are signed by the routes' key for the host key they serve: the same key
/// gives the same cookie (a restarted daemon given its old key keeps visitors where they
/// were), a preview's cookie is not the production one's.
#[test]
fn affinity_cookies_are_signed_for_their_host_under_the_routes_key() {
    let cookie = |routes: &Routes, key: &str, host: &str| {
        let target = Target::proxy(
            "dpl_1",
            [("web.1", at(1)), ("web.2", at(2))],
            Affinity::Cookie,
        );
        match key.contains("--") {
            true => routes.set_preview(key, Some(target)),
            false => routes.set_live(key, Some(target)),
        }
        let upstreams = upstreams_of(routes, host);
        let choice = upstreams.choose(&http::HeaderMap::new()).unwrap();
        let mut headers = http::HeaderMap::new();
        upstreams.set_affinity_cookie(choice, 1, false, &mut headers);
        headers["set-cookie"].to_str().unwrap().to_owned()
    };
    let new = || Routes::new("slipway.localhost".into(), "localhost".into());
    let one = new().with_affinity_key([3; 32]);
    let again = new().with_affinity_key([3; 32]);
    let other = new().with_affinity_key([4; 32]);
    let shop = cookie(&one, "shop", "shop.localhost");
    assert!(shop.starts_with("slipway_instance=web.2."), "{shop}");
    assert_eq!(shop, cookie(&again, "shop", "shop.localhost"));
    assert_ne!(shop, cookie(&other, "shop", "shop.localhost"));
    assert_ne!(shop, cookie(&one, "pr-1--shop", "pr-1--shop.localhost"));
    // A scaled-up instance gets its cookie too, and an added one is valid at once.
    one.set_instance("shop", "dpl_1", "web.3", at(3));
    let upstreams = upstreams_of(&one, "shop.localhost");
    let mut headers = http::HeaderMap::new();
    let choice = upstreams.choose(&headers).unwrap();
    upstreams.set_affinity_cookie(choice, 2, false, &mut headers);
    let web_3 = headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let mut request = http::HeaderMap::new();
    request.insert("cookie", web_3.parse().unwrap());
    assert_eq!(
        upstreams.choose(&request).map(|choice| choice.first),
        Some(2)
    );
}

/// Requests to a project's instances count in its activity, across instance changes and
/// deployments; a sleeping target is its own kind and sends one wake call.
#[test]
fn activity_counts_requests_across_snapshots_and_sleep_is_a_target() {
    let routes = Routes::new("slipway.localhost".into(), "localhost".into());
    let address: SocketAddr = "127.0.0.1:9".parse().unwrap();
    routes.set_live(
        "web",
        Some(Target::proxy(
            "dpl_1",
            [(FIRST_WEB_INSTANCE, Some(address))],
            Affinity::None,
        )),
    );
    let upstreams = |routes: &Routes| match routes.resolve("web.localhost") {
        Destination::App {
            target: Some(Target::Proxy { upstreams, .. }),
            ..
        } => upstreams,
        _ => panic!("not proxied"),
    };
    let activity = routes.activity("web").expect("made with the live target");
    let first = upstreams(&routes).enter(0);
    routes.set_instance("web", "dpl_1", "web.2", Some(address));
    let second = upstreams(&routes).enter(1);
    assert_eq!(activity.open(), 2);
    drop(first);
    routes.set_live(
        "web",
        Some(Target::proxy(
            "dpl_2",
            [(FIRST_WEB_INSTANCE, Some(address))],
            Affinity::None,
        )),
    );
    let third = upstreams(&routes).enter(0);
    assert_eq!(activity.open(), 2, "the same activity after a deploy");
    drop((second, third));
    assert_eq!(activity.open(), 0);

    let mut calls = routes.take_wake_calls().expect("taken once");
    assert!(routes.take_wake_calls().is_none());
    routes.set_live(
        "web",
        Some(routes.asleep("web", "dpl_2", SleepStrategy::Hold)),
    );
    let Destination::App {
        target: Some(Target::Asleep(asleep)),
        ..
    } = routes.resolve("web.localhost")
    else {
        panic!("not asleep");
    };
    assert_eq!(asleep.deployment_id(), "dpl_2");
    assert!(asleep.wake());
    assert!(!asleep.wake());
    assert_eq!(calls.try_recv().unwrap().label, "web");
    assert!(calls.try_recv().is_err());
}
