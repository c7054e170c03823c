//! Choosing instances and checking affinity cookies, without sockets.

use std::net::SocketAddr;

use http::{HeaderMap, HeaderValue};

use super::*;

fn address(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

fn three() -> Upstreams {
    Upstreams::new(
        [
            ("web.1", address(1001)),
            ("web.2", address(1002)),
            ("web.3", address(1003)),
        ],
        Affinity::None,
    )
}

/// The random bits that make `pick_with` draw the `one`-th and then the `other`-th of the
/// candidates left (the second draw skips the first).
fn draw(one: u64, other: u64) -> u64 {
    other << 32 | one
}

#[test]
fn the_less_loaded_of_the_two_drawn_wins() {
    let upstreams = three();
    let _busy = [
        upstreams.instances()[0].enter(),
        upstreams.instances()[0].enter(),
    ];
    let _one = upstreams.instances()[2].enter();
    // web.1 (2 in flight) against web.2 (0), either way round.
    assert_eq!(upstreams.pick_with(draw(0, 0)), Some(1));
    assert_eq!(upstreams.pick_with(draw(1, 0)), Some(1));
    // web.1 (2) against web.3 (1).
    assert_eq!(upstreams.pick_with(draw(0, 1)), Some(2));
    // web.3 (1) against web.2 (0).
    assert_eq!(upstreams.pick_with(draw(2, 1)), Some(1));
    // The two drawn are always distinct: with two instances, the idle one always wins.
    let two = Upstreams::new([("a", address(1)), ("b", address(2))], Affinity::None);
    let _held = two.instances()[0].enter();
    for bits in [0, 1, u64::MAX, 0x1234_5678_9abc_def0] {
        assert_eq!(two.pick_with(bits), Some(1), "bits {bits:#x}");
    }
    for _ in 0..100 {
        assert_eq!(two.pick(), Some(1));
    }
}

#[test]
fn in_flight_guards_count_and_uncount() {
    let upstreams = three();
    let instance = &upstreams.instances()[1];
    let first = instance.enter();
    let second = instance.enter();
    assert_eq!(instance.load(), 2);
    drop(first);
    assert_eq!(instance.load(), 1);
    drop(second);
    assert_eq!(instance.load(), 0);
}

#[test]
fn instances_without_an_address_are_never_chosen() {
    let upstreams = Upstreams::new(
        [
            ("web.1", address(1001)),
            ("web.2", None),
            ("web.3", address(1003)),
        ],
        Affinity::None,
    );
    assert!(upstreams.serving());
    for _ in 0..200 {
        assert_ne!(upstreams.pick(), Some(1));
        assert!(upstreams.pick().is_some());
    }
    let one_left = Upstreams::new([("web.1", None), ("web.2", address(2))], Affinity::None);
    assert_eq!(one_left.pick_with(u64::MAX), Some(1));
    let none_left = Upstreams::new([("web.1", None), ("web.2", None)], Affinity::None);
    assert!(!none_left.serving());
    assert_eq!(none_left.pick(), None);
    assert_eq!(none_left.choose(&HeaderMap::new()), None);
    // One instance: no draw, and nothing without its address.
    assert_eq!(Upstreams::one(address(1).unwrap()).pick(), Some(0));
    let restarting = Upstreams::new([(FIRST_WEB_INSTANCE, None)], Affinity::None);
    assert_eq!(restarting.pick(), None);
    assert!(Upstreams::new(Vec::<(&str, _)>::new(), Affinity::None)
        .pick()
        .is_none());
}

#[test]
fn attempts_try_each_serving_instance_once_starting_with_the_chosen() {
    let upstreams = Upstreams::new(
        [
            ("web.1", address(1)),
            ("web.2", None),
            ("web.3", address(3)),
            ("web.4", address(4)),
        ],
        Affinity::None,
    );
    let order: Vec<&str> = upstreams
        .attempts(2)
        .map(|(_, instance, _)| instance.name())
        .collect();
    assert_eq!(order, ["web.3", "web.4", "web.1"]);
    let ports: Vec<u16> = upstreams.attempts(3).map(|(_, _, a)| a.port()).collect();
    assert_eq!(ports, [4, 1, 3]);
}

#[test]
fn a_repeated_name_is_one_instance() {
    let upstreams = Upstreams::new(
        [("web.1", address(1)), ("web.1", address(2))],
        Affinity::None,
    );
    assert_eq!(upstreams.instances().len(), 1);
    assert_eq!(upstreams.instances()[0].address(), address(2));
}

fn cookie_request(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.append("cookie", HeaderValue::from_static("theme=dark"));
    headers.append("cookie", HeaderValue::from_str(value).unwrap());
    headers
}

/// The cookie value a response from instance `index` sets.
fn issued(upstreams: &Upstreams, index: usize) -> String {
    let choice = Choice {
        first: index,
        cookie: None,
    };
    let mut headers = HeaderMap::new();
    upstreams.set_affinity_cookie(choice, index, true, &mut headers);
    let set = headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set.ends_with("; Path=/; HttpOnly; SameSite=Lax; Secure"),
        "{set}"
    );
    let pair = set.split(';').next().unwrap();
    pair.to_owned()
}

#[test]
fn a_valid_cookie_picks_its_instance_and_a_forged_or_unknown_one_does_not() {
    let key = AffinityKey::new([7; 32]);
    let upstreams = Upstreams::new(
        [
            ("web.1", address(1)),
            ("web.2", address(2)),
            ("web.3", None),
        ],
        Affinity::Cookie,
    )
    .with_cookies(&key, "shop");
    let web_2 = issued(&upstreams, 1);
    assert!(web_2.starts_with("slipway_instance=web.2."), "{web_2}");
    let chosen = upstreams.choose(&cookie_request(&format!("a=1; {web_2}; b=2")));
    let Some(choice) = chosen else {
        panic!("no choice")
    };
    assert_eq!(choice.first, 1, "a valid cookie goes to its instance");
    // The visitor has the cookie of the instance that answered: no new one.
    let mut headers = HeaderMap::new();
    upstreams.set_affinity_cookie(choice, 1, false, &mut headers);
    assert!(headers.is_empty());
    // Answered by another (web.2 could not be reached): that one's cookie, without Secure
    // over plain HTTP.
    upstreams.set_affinity_cookie(choice, 0, false, &mut headers);
    let set = headers["set-cookie"].to_str().unwrap();
    assert!(set.starts_with("slipway_instance=web.1."), "{set}");
    assert!(!set.contains("Secure"), "{set}");

    let forged = web_2.replace("web.2.", "web.1.");
    let mut last = web_2.clone();
    let flipped = if last.ends_with('0') { '1' } else { '0' };
    last.pop();
    last.push(flipped);
    let other_host = issued(
        &Upstreams::new([("web.2", address(2))], Affinity::Cookie).with_cookies(&key, "blog"),
        0,
    );
    let other_key = issued(
        &Upstreams::new([("web.2", address(2))], Affinity::Cookie)
            .with_cookies(&AffinityKey::new([8; 32]), "shop"),
        0,
    );
    for (what, value) in [
        ("another instance's name on web.2's mac", forged.as_str()),
        ("a changed mac", last.as_str()),
        ("another host's cookie", other_host.as_str()),
        ("another key's cookie", other_key.as_str()),
        (
            "an unknown instance",
            "slipway_instance=web.9.00112233445566778899aabbccddeeff",
        ),
        ("no mac", "slipway_instance=web.2"),
        ("an empty value", "slipway_instance="),
    ] {
        assert_eq!(
            affinity::find(upstreams.instances(), &cookie_request(value)),
            None,
            "{what}: {value}"
        );
        assert!(upstreams.choose(&cookie_request(value)).is_some());
    }
    // A valid cookie for an instance that is out: chosen afresh.
    let web_3 = issued(&upstreams, 2);
    assert_eq!(
        affinity::find(upstreams.instances(), &cookie_request(&web_3)),
        None
    );
    // Without affinity, cookies are not looked at and none is set.
    let plain = three();
    let choice = plain.choose(&cookie_request(&web_2)).unwrap();
    let mut headers = HeaderMap::new();
    plain.set_affinity_cookie(choice, choice.first, true, &mut headers);
    assert!(headers.is_empty());
}

#[test]
fn names_that_cannot_be_cookie_values_get_no_cookie() {
    let key = AffinityKey::new([1; 32]);
    for name in ["web 1", "web;1", "", "wéb"] {
        assert!(key.cookie("shop", name).is_none(), "{name:?}");
    }
    assert!(key.cookie("shop", "web-2_x.3").is_some());
}
