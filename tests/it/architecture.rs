//! The invariants of ARCHITECTURE.md that a reading of the source can check: no import cycle
//! between top-level modules, error code strings only in `error_code.rs`, redb only in `store/`,
//! no `json!` response bodies in the API. Run alone with `cargo test --test it architecture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its top-level module and its non-test text.
struct SourceFile {
    path: PathBuf,
    module: String,
    code: String,
}

fn source_files() -> Vec<SourceFile> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).unwrap();
            let first = relative.components().next().unwrap().as_os_str();
            let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
            let text = std::fs::read_to_string(&path).expect("read source");
            // Unit tests live after the first `#[cfg(test)]`; they may spell anything.
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
            files.push(SourceFile { path, module, code });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// `crate::x` paths and `use crate::{x, y::z}` groups.
fn referenced_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (index, _) in code.match_indices("crate::") {
        let rest = &code[index + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                found.insert(identifier(item.trim()));
            }
        } else {
            found.insert(identifier(rest));
        }
    }
    found.remove("");
    found
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
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

fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in source_files() {
        if file.module == "main" || file.module == "lib" {
            continue;
        }
        let targets = referenced_modules(&file.code);
        let entry = edges.entry(file.module.clone()).or_default();
        entry.extend(targets.into_iter().filter(|t| *t != file.module));
    }
    edges
}

#[test]
fn top_level_modules_import_each_other_without_cycles() {
    let edges = module_graph();
    assert!(edges.contains_key("api") && edges.contains_key("dispatch"));
    let found = cycles(&edges);
    let graph: Vec<String> = edges
        .iter()
        .map(|(module, targets)| {
            let known: Vec<&str> = targets
                .iter()
                .filter(|t| edges.contains_key(*t))
                .map(String::as_str)
                .collect();
            format!("{module} -> {}", known.join(", "))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles among top-level modules: {found:?}\ngraph:\n{}",
        graph.join("\n")
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
}

#[test]
fn error_codes_are_spelled_only_in_the_enum() {
    let enum_text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/error_code.rs"))
            .unwrap();
    let spellings: Vec<String> = enum_text
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once("=> \"")?;
            Some(rest.split('"').next()?.to_owned())
        })
        .collect();
    assert!(spellings.len() >= 30, "{spellings:?}");
    let mut offenders = Vec::new();
    for file in source_files() {
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
    let offenders: Vec<String> = source_files()
        .into_iter()
        .filter(|file| file.module != "store" && file.code.contains("redb::"))
        .map(|file| file.path.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "redb outside store/: {offenders:?}");
}
