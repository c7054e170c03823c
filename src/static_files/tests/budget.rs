//! Memory: loading is bounded, sites share one budget, and hot files are promoted into
//! memory in the place of cold ones.

use super::*;

#[test]
fn loading_is_bounded() {
    let directory = tempfile::tempdir().unwrap();
    write_site(directory.path(), false);
    let too_few = StaticLimits {
        max_files: 3,
        ..StaticLimits::STANDARD
    };
    assert!(StaticSite::load_with_limits(directory.path(), &too_few).is_err());
    let tiny_budget = StaticLimits {
        memory_budget: 100,
        ..StaticLimits::STANDARD
    };
    let site = StaticSite::load_with_limits(directory.path(), &tiny_budget).unwrap();
    assert!(site.bytes_in_memory() <= 100);
    assert!(StaticSite::load(&directory.path().join("index.html")).is_err());
}

/// Sites share one budget: loading takes up to half of it, the second site gets what the
/// first left, serves the rest from disk with the same bodies until a file turns hot and moves
/// into memory, and a dropped site gives everything back.
#[test]
fn sites_share_one_memory_budget() {
    use crate::static_files::MemoryBudget;
    use http::Request;
    let directory = tempfile::tempdir().unwrap();
    let root = directory.path();
    std::fs::write(root.join("index.html"), "x".repeat(600)).unwrap();
    std::fs::write(root.join("small.css"), "y".repeat(300)).unwrap();
    let budget = MemoryBudget::new(2000);
    let first = StaticSite::load_shared(root, &budget).unwrap();
    assert_eq!(first.bytes_in_memory(), 900);
    let second = StaticSite::load_shared(root, &budget).unwrap();
    assert_eq!(
        second.bytes_in_memory(),
        0,
        "loading stops at half the budget"
    );
    assert_eq!(budget.used(), 900);
    let get = |site: &StaticSite| {
        let response = site.serve(&Request::builder().uri("/").body(()).unwrap());
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-length"], "600");
    };
    for _ in 0..7 {
        get(&second);
    }
    assert_eq!(budget.used(), 900, "not hot yet");
    get(&second);
    assert_eq!(budget.used(), 1500, "hot: read into memory");
    drop(first);
    assert_eq!(budget.used(), 600);
    drop(second);
    assert_eq!(budget.used(), 0);
}

/// With the budget full, a file that turns hot takes the place of promoted files nobody asked
/// for since the clock last passed; the ones still asked for stay.
#[test]
fn hot_files_evict_cold_promoted_ones() {
    use crate::static_files::MemoryBudget;
    use http::Request;
    let directory = tempfile::tempdir().unwrap();
    let root = directory.path();
    for name in ["a", "b", "c"] {
        std::fs::write(root.join(format!("{name}.txt")), name.repeat(400)).unwrap();
    }
    // Half of 1000 for loading: a.txt is preloaded, b and c are not.
    let budget = MemoryBudget::new(1000);
    let filler = tempfile::tempdir().unwrap();
    std::fs::write(filler.path().join("f.txt"), "f".repeat(500)).unwrap();
    let _preloaded = StaticSite::load_shared(filler.path(), &budget).unwrap();
    let site = StaticSite::load_shared(root, &budget).unwrap();
    assert_eq!((site.bytes_in_memory(), budget.used()), (0, 500));
    let get = |path: &str, times: usize| {
        for _ in 0..times {
            let response = site.serve(&Request::builder().uri(path).body(()).unwrap());
            assert_eq!(response.status(), 200);
        }
    };
    let in_memory = || {
        (
            site.serves_from_memory("/b.txt"),
            site.serves_from_memory("/c.txt"),
        )
    };
    get("/b.txt", 7);
    assert_eq!(in_memory(), (false, false));
    get("/b.txt", 1);
    assert_eq!(
        (in_memory(), budget.used()),
        ((true, false), 900),
        "b promoted"
    );
    get("/c.txt", 8);
    assert_eq!(
        (in_memory(), budget.used()),
        ((false, true), 900),
        "c took b's place: b was not asked for since"
    );
    get("/c.txt", 1);
    get("/b.txt", 8);
    assert_eq!(
        (in_memory(), budget.used()),
        ((true, false), 900),
        "b is back: c was referenced, passed, then evicted on the second turn"
    );
    drop(site);
    assert_eq!(budget.used(), 500);
}
