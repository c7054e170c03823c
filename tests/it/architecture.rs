//! The invariants of ARCHITECTURE.md that a reading of the source can check: no import cycle
//! between top-level modules nor between the children of one, no import running back up the
//! layers the checks name, error code strings only in `error_code.rs`, redb only in `store/`,
//! `unsafe` only in `sys/`, no `json!` response bodies in the API, and one module layout. Every file the module tree
//! reaches is read whole; only the bodies of test modules are skipped (`source.rs`). Run alone
//! with `cargo test --test it architecture`.

mod lexer;
mod source;

use std::collections::{BTreeMap, BTreeSet};

use source::{non_test_text, Crate};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The imports between the top-level modules (`main.rs` and `lib.rs` left out).
fn top_level_graph(krate: &Crate) -> Graph {
    let mut edges = Graph::new();
    for file in &krate.files {
        if file.module.is_empty() || file.top() == "main" {
            continue;
        }
        let entry = edges.entry(file.top().to_owned()).or_default();
        for target in krate.references(file) {
            if let Some(first) = target.first().filter(|first| *first != file.top()) {
                entry.insert(first.clone());
            }
        }
    }
    edges
}

/// The imports between the children of the top-level module `top` (its root file left out:
/// it declares them).
fn child_graph(krate: &Crate, top: &str) -> Graph {
    let mut edges = Graph::new();
    for file in &krate.files {
        if file.top() != top || file.module.len() < 2 {
            continue;
        }
        let child = &file.module[1];
        let entry = edges.entry(child.clone()).or_default();
        for target in krate.references(file) {
            if target.len() >= 2 && target[0] == top && target[1] != *child {
                entry.insert(target[1].clone());
            }
        }
    }
    edges
}

fn render(edges: &Graph) -> String {
    edges
        .iter()
        .map(|(module, targets)| {
            let known: Vec<&str> = targets
                .iter()
                .filter(|target| edges.contains_key(*target))
                .map(String::as_str)
                .collect();
            format!("{module} -> {}", known.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn top_level_modules_import_each_other_without_cycles() {
    let edges = top_level_graph(&Crate::read());
    assert!(edges.contains_key("api") && edges.contains_key("dispatch"));
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "import cycles among top-level modules: {found:?}\ngraph:\n{}",
        render(&edges)
    );
    // The request path of app hosts never reaches the API's state or the store.
    for forbidden in ["api", "store", "app", "control", "pipeline"] {
        assert!(
            !edges["dispatch"].contains(forbidden),
            "dispatch imports {forbidden}"
        );
    }
    assert!(
        !edges["api"].contains("app"),
        "api imports app, which wires it"
    );
    // `sys` is the bottom layer: safe wrappers of system calls, over no module of ours.
    assert!(
        edges["sys"].is_empty(),
        "sys imports {:?}; it must import no other module of the crate",
        edges["sys"]
    );
}

/// No cycles between the children of one module (issue 30 closed the last ones).
#[test]
fn the_children_of_a_module_import_each_other_without_cycles() {
    let krate = Crate::read();
    let tops: BTreeSet<&str> = krate.files.iter().map(|file| file.top()).collect();
    assert!(tops.contains("sandbox"));
    let mut found = Vec::new();
    for top in tops {
        let edges = child_graph(&krate, top);
        for cycle in cycles(&edges) {
            found.push(format!("{top}: {cycle:?}\n{}", render(&edges)));
        }
    }
    assert!(
        found.is_empty(),
        "import cycles inside top-level modules:\n{}",
        found.join("\n")
    );
}

/// "One module layout": a module with children is `x/mod.rs`, never `x.rs` beside a
/// directory `x/`.
#[test]
fn no_module_file_sits_beside_its_directory() {
    let mut offenders = Vec::new();
    let mut pending = vec![source::src_dir()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                if path.with_extension("rs").exists() {
                    offenders.push(path.with_extension("rs").display().to_string());
                }
                pending.push(path);
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "x.rs beside x/ (make it x/mod.rs): {offenders:?}"
    );
}

#[test]
fn the_reader_skips_only_the_bodies_of_test_modules() {
    let text = r#"
        use crate::a::X; // crate::commented
        #[cfg(test)]
        fn helper() {}
        fn tail() { crate::b::y() }
        #[cfg(test)]
        mod tests { use crate::hidden; fn f() { let _ = "}"; let _ = '}'; } }
        const S: &str = "crate::in_a_string";
        fn after() { crate::c::z() }
    "#;
    let (_, skeleton, _) = non_test_text(text);
    for seen in ["crate::a", "crate::b", "crate::c"] {
        assert!(skeleton.contains(seen), "{seen} not read:\n{skeleton}");
    }
    for unseen in ["crate::hidden", "crate::commented", "crate::in_a_string"] {
        assert!(!skeleton.contains(unseen), "{unseen} read:\n{skeleton}");
    }
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let next_index = state.index.len();
        state.index.insert(node, next_index);
        state.low.insert(node, next_index);
        state.stack.push(node);
        for target in &state.edges[node] {
            if !state.edges.contains_key(target) {
                continue;
            }
            if !state.index.contains_key(target.as_str()) {
                visit(state, target);
                let low = state.low[node].min(state.low[target.as_str()]);
                state.low.insert(node, low);
            } else if state.stack.contains(&target.as_str()) {
                let low = state.low[node].min(state.index[target.as_str()]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                component.push(top.to_owned());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

#[test]
fn error_codes_are_spelled_only_in_the_enum() {
    let enum_text = std::fs::read_to_string(source::src_dir().join("error_code.rs")).unwrap();
    let spellings: Vec<String> = enum_text
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once("=> \"")?;
            Some(rest.split('"').next()?.to_owned())
        })
        .collect();
    assert!(spellings.len() >= 30, "{spellings:?}");
    let krate = Crate::read();
    let mut offenders = Vec::new();
    for file in &krate.files {
        if file.path.ends_with("error_code.rs") {
            continue;
        }
        for spelling in &spellings {
            if file.code.contains(&format!("\"{spelling}\"")) {
                offenders.push(format!("{}: \"{spelling}\"", file.path.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "error code strings outside src/error_code.rs (use ErrorCode):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn only_the_store_imports_redb() {
    let offenders: Vec<String> = Crate::read()
        .files
        .into_iter()
        .filter(|file| file.top() != "store" && file.skeleton.contains("redb::"))
        .map(|file| file.path.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "redb outside store/: {offenders:?}");
}

/// "`unsafe` only in `sys/`": no source file outside `src/sys/` writes the keyword `unsafe`
/// in code (comments and string literals are not code). Every `.rs` file under `src/` is
/// read whole, test modules and test-only files included: the lint allows `unsafe_code`
/// only on `sys`, and that `#[allow]` is written once, on `mod sys` in `lib.rs`.
#[test]
fn unsafe_is_written_only_in_sys() {
    let src = source::src_dir();
    let sys = src.join("sys");
    let mut offenders = Vec::new();
    let mut allows = Vec::new();
    let mut pending = vec![src.clone()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.starts_with(&sys) || path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let place = path.strip_prefix(&src).unwrap().display().to_string();
            offenders.extend(
                unsafe_lines(&text)
                    .into_iter()
                    .map(|line| format!("src/{place}:{line}")),
            );
            let (_, skeleton) = lexer::without_comments(&text);
            for (index, _) in skeleton.match_indices("allow(unsafe_code)") {
                let item = skeleton[index..]
                    .split_once(']')
                    .map_or("", |(_, rest)| rest);
                let on_sys = item.trim_start().starts_with("pub(crate) mod sys;");
                if place != "lib.rs" || !on_sys {
                    let line = skeleton[..index].matches('\n').count() + 1;
                    allows.push(format!("src/{place}:{line}"));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "`unsafe` outside src/sys/ (add a safe wrapper to sys/ instead):\n{}",
        offenders.join("\n")
    );
    assert!(
        allows.is_empty(),
        "`allow(unsafe_code)` on something other than `mod sys` in lib.rs: {allows:?}"
    );
}

/// The lines of `text` on which the keyword `unsafe` is written in code.
fn unsafe_lines(text: &str) -> Vec<usize> {
    let (_, skeleton) = lexer::without_comments(text);
    let bytes = skeleton.as_bytes();
    skeleton
        .match_indices("unsafe")
        .filter(|(index, word)| {
            let end = index + word.len();
            (*index == 0 || !source::is_ident(bytes[index - 1]))
                && (end == bytes.len() || !source::is_ident(bytes[end]))
        })
        .map(|(index, _)| skeleton[..index].matches('\n').count() + 1)
        .collect()
}

#[test]
fn the_unsafe_check_sees_code_and_not_comments_or_strings() {
    let text = r#"
        // unsafe in a comment
        /* unsafe */
        #[allow(unsafe_code)]
        const S: &str = "unsafe";
        fn f() { let _ = r"unsafe"; }
        fn g() { unsafe { h() } }
        unsafe fn h() {}
    "#;
    assert_eq!(unsafe_lines(text), [7, 8]);
}

/// "No `json!` response bodies in the API": every JSON body the API and the control host send
/// is a value of a serde type (`api/types/`), written by `api::json_response`, the error
/// envelope (`api/error.rs`) or the log stream's events (`api/logs.rs`). What the source shows
/// of that: in `api/` and `control.rs`, `json!` is written only inside `#[schemars(…)]`
/// attributes (examples in the OpenAPI document) and in `api/openapi/` (JSON Schema fragments
/// of the typed document); no string literal is a JSON object; and every JSON response of
/// the route table is `shape::<Type>` of a named type, never `serde_json::Value` (the OpenAPI
/// document's own `AnyObject` once).
#[test]
fn api_response_bodies_are_serde_types_not_json_macros() {
    let krate = Crate::read();
    let mut offenders = Vec::new();
    for file in &krate.files {
        let in_api = file.top() == "api" || file.top() == "control";
        if !in_api || file.module.get(1).is_some_and(|child| child == "openapi") {
            continue;
        }
        let place = file.path.display();
        for (index, _) in file.skeleton.match_indices("json!") {
            let bytes = file.skeleton.as_bytes();
            if index > 0 && source::is_ident(bytes[index - 1]) {
                continue;
            }
            if !inside_schemars_attribute(&file.skeleton, index) {
                let line = file.skeleton[..index].lines().count();
                offenders.push(format!("{place}:{line}: json!"));
            }
        }
        for literal in ["\"{\\\"", "#\"{\""] {
            if file.code.contains(literal) {
                offenders.push(format!("{place}: a JSON object as a string literal"));
            }
        }
        if file.module == ["api"] {
            let shapes: Vec<&str> = file
                .skeleton
                .split("ResponseBody::Json(shape::<")
                .skip(1)
                .map(|rest| rest.split(">)").next().unwrap_or(rest).trim())
                .collect();
            assert!(shapes.len() >= 20, "the route table's shapes: {shapes:?}");
            let untyped = shapes
                .iter()
                .filter(|shape| shape.contains("Value") || shape.contains("::"));
            offenders.extend(untyped.map(|shape| format!("{place}: a route answers {shape}")));
            if shapes.iter().filter(|shape| **shape == "AnyObject").count() > 1 {
                offenders.push(format!("{place}: AnyObject answers more than the document"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "JSON response bodies not built from serde types (api/types/):\n{}",
        offenders.join("\n")
    );
}

/// Whether `index` is inside a `#[schemars(…)]` attribute of `skeleton`.
fn inside_schemars_attribute(skeleton: &str, index: usize) -> bool {
    let Some(start) = skeleton[..index].rfind("#[schemars(") else {
        return false;
    };
    let mut depth = 0i32;
    for byte in skeleton[start + 1..index].bytes() {
        match byte {
            b'[' => depth += 1,
            b']' => depth -= 1,
            _ => {}
        }
    }
    depth > 0
}
