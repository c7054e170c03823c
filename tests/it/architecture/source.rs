//! Reading the crate's source for the architecture checks: every file the module tree reaches
//! from `src/lib.rs` and `src/main.rs`, without comments and without the bodies of test modules
//! (`#[cfg(test)] mod name { … }`, and the files of `#[cfg(test)] mod name;`), and the paths
//! each file names (`crate::…`, `super::…`, `self::…`) as absolute module paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::lexer::{blank, without_comments};

/// One compiled, non-test source file.
pub struct SourceFile {
    pub path: PathBuf,
    /// The module this file is, from the crate root: `[]` for `lib.rs`, `["main"]` for
    /// `main.rs`, `["sandbox", "exec"]` for `sandbox/exec.rs`.
    pub module: Vec<String>,
    /// The text without comments or test module bodies; string literals as written.
    pub code: String,
    /// `code` with the contents of string and character literals blanked as well.
    pub skeleton: String,
}

impl SourceFile {
    /// The top-level module this file belongs to (`lib` for `lib.rs`).
    pub fn top(&self) -> &str {
        self.module.first().map(String::as_str).unwrap_or("lib")
    }

    /// Whether this file is the root of its module (`lib.rs`, `main.rs`, `x/mod.rs`,
    /// `x.rs`), so that `self` is its own module path and children resolve below it.
    fn resolves_below(&self) -> bool {
        let name = self.path.file_name().unwrap().to_string_lossy();
        name == "mod.rs" || name == "lib.rs" || name == "main.rs"
    }
}

pub fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every file reached through `mod` declarations from the two crate roots, test files left out.
pub fn source_files() -> Vec<SourceFile> {
    let src = src_dir();
    let mut files = Vec::new();
    let mut pending = vec![
        (src.join("lib.rs"), Vec::new()),
        (src.join("main.rs"), vec!["main".to_owned()]),
    ];
    while let Some((path, module)) = pending.pop() {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
        let (code, skeleton, declarations) = non_test_text(&text);
        let file = SourceFile {
            path: path.clone(),
            module: module.clone(),
            code,
            skeleton,
        };
        for declaration in declarations {
            if declaration.body.is_some() {
                continue; // an inline module: its text stays part of this file
            }
            let directory = match (&declaration.path_attribute, file.resolves_below()) {
                (Some(_), _) | (None, true) => path.parent().unwrap().to_path_buf(),
                (None, false) => path.with_extension(""),
            };
            let child = match &declaration.path_attribute {
                Some(relative) => directory.join(relative),
                None => {
                    let flat = directory.join(format!("{}.rs", declaration.name));
                    match flat.exists() {
                        true => flat,
                        false => directory.join(&declaration.name).join("mod.rs"),
                    }
                }
            };
            let mut child_module = module.clone();
            child_module.push(declaration.name);
            pending.push((child, child_module));
        }
        files.push(file);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// `text` without comments and without the bodies of test modules (as `code` and as the
/// `skeleton` with literals blanked too), and its non-test module declarations. Everything
/// else stays, a `#[cfg(test)]` on any other item included, and so does all that follows.
pub fn non_test_text(text: &str) -> (String, String, Vec<ModuleDeclaration>) {
    let (mut code, mut skeleton) = without_comments(text);
    let mut kept = Vec::new();
    for declaration in module_declarations(&code, &skeleton) {
        match (declaration.test, &declaration.body) {
            (false, _) => kept.push(declaration),
            (true, Some(body)) => {
                blank(&mut code, body.clone());
                blank(&mut skeleton, body.clone());
            }
            (true, None) => {} // a test module's own file is never read
        }
    }
    (code, skeleton, kept)
}

/// The crate's files and module tree, and what each module's `use` items bring in.
pub struct Crate {
    pub files: Vec<SourceFile>,
    /// Every module path (`[]` is the crate root).
    pub modules: BTreeSet<Vec<String>>,
    /// Per module: a name its `use` items bring in → the absolute path it stands for.
    aliases: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    pub fn read() -> Crate {
        let files = source_files();
        let modules: BTreeSet<Vec<String>> = files
            .iter()
            .map(|file| file.module.clone())
            .chain([Vec::new()])
            .collect();
        let mut krate = Crate {
            files,
            modules,
            aliases: BTreeMap::new(),
        };
        let mut aliases: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for file in &krate.files {
            for (index, _) in word_indices(&file.skeleton, "use") {
                let statement = &file.skeleton[index..];
                let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
                for (segments, alias) in path_tree_with_aliases(&statement[3..]) {
                    let Some(path) = krate.absolute(&file.module, &segments) else {
                        continue;
                    };
                    if alias.as_deref() == Some("*") {
                        continue;
                    }
                    let name = alias.unwrap_or_else(|| path.last().cloned().unwrap_or_default());
                    aliases
                        .entry(file.module.clone())
                        .or_default()
                        .insert(name, path);
                }
            }
        }
        krate.aliases = aliases;
        krate
    }

    /// The modules `file` names, each the longest known module prefix of a path it writes
    /// (`crate::a::b::Item`, `super::c`, `self::d`, leaves of `use` groups), after following
    /// `use` re-exports (`super::Name` where the parent did `use sibling::Name`).
    pub fn references(&self, file: &SourceFile) -> BTreeSet<Vec<String>> {
        let mut found = BTreeSet::new();
        for root in ["crate", "super", "self"] {
            for (index, _) in word_indices(&file.skeleton, root) {
                let text = &file.skeleton[index..];
                if !text[root.len()..].trim_start().starts_with("::")
                    || file.skeleton[..index].trim_end().ends_with("::")
                {
                    continue;
                }
                for segments in path_tree(text) {
                    if let Some(path) = self.absolute(&file.module, &segments) {
                        found.insert(self.module_of(&self.follow(path)));
                    }
                }
            }
        }
        found
    }

    /// `segments` as written in `module` (`crate::…`, `super::…`, `self::…`, `child::…`) as
    /// an absolute path; `None` for a path into another crate.
    fn absolute(&self, module: &[String], segments: &[String]) -> Option<Vec<String>> {
        let mut base = module.to_vec();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                let mut child = base.clone();
                child.push(first.to_owned());
                if !self.modules.contains(&child) {
                    return None;
                }
            }
            None => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// Follows `use` aliases: `a::Name` where module `a` imported `Name` from elsewhere.
    fn follow(&self, mut path: Vec<String>) -> Vec<String> {
        for _ in 0..4 {
            let module = self.module_of(&path);
            let Some(name) = path.get(module.len()) else {
                return path;
            };
            let Some(target) = self.aliases.get(&module).and_then(|names| names.get(name)) else {
                return path;
            };
            let mut next = target.clone();
            next.extend(path[module.len() + 1..].iter().cloned());
            if next == path {
                return path;
            }
            path = next;
        }
        path
    }

    /// The longest prefix of `path` that is a module.
    fn module_of(&self, path: &[String]) -> Vec<String> {
        (0..=path.len())
            .rev()
            .map(|length| path[..length].to_vec())
            .find(|prefix| self.modules.contains(prefix))
            .unwrap_or_default()
    }
}

/// Where `word` occurs as a whole word in `text`.
fn word_indices<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = (usize, &'a str)> + 'a {
    let bytes = text.as_bytes();
    text.match_indices(word).filter(move |(index, _)| {
        let end = index + word.len();
        (*index == 0 || !is_ident(bytes[index - 1]))
            && (end == bytes.len() || !is_ident(bytes[end]))
    })
}

/// The leaf paths of a path tree starting at `text`: `a::b::C`, `{a, b::{c, d}}`.
pub fn path_tree(text: &str) -> Vec<Vec<String>> {
    path_tree_with_aliases(text)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

fn path_tree_with_aliases(text: &str) -> Vec<(Vec<String>, Option<String>)> {
    let mut found = Vec::new();
    parse_tree(text.trim_start(), Vec::new(), &mut found);
    found
}

/// Parses one tree at the start of `text` below `prefix`; returns the unread rest.
fn parse_tree<'a>(
    text: &'a str,
    prefix: Vec<String>,
    found: &mut Vec<(Vec<String>, Option<String>)>,
) -> &'a str {
    let text = text.trim_start();
    if let Some(mut inner) = text.strip_prefix('{') {
        loop {
            inner = parse_tree(inner, prefix.clone(), found).trim_start();
            match inner.as_bytes().first() {
                Some(b',') => inner = &inner[1..],
                Some(b'}') => return &inner[1..],
                _ => return inner,
            }
            if let Some(after) = inner.trim_start().strip_prefix('}') {
                return after;
            }
        }
    }
    let length = text.bytes().take_while(|b| is_ident(*b)).count();
    let name = &text[..length];
    let rest = &text[length..];
    if name.is_empty() || name == "self" && !prefix.is_empty() {
        let glob = rest.trim_start().starts_with('*');
        if !prefix.is_empty() {
            found.push((prefix, glob.then(|| "*".to_owned())));
        }
        return rest.trim_start().trim_start_matches('*');
    }
    let mut path = prefix;
    path.push(name.to_owned());
    let after = rest.trim_start();
    if let Some(deeper) = after.strip_prefix("::") {
        if deeper.trim_start().starts_with('<') {
            found.push((path, None));
            return deeper;
        }
        return parse_tree(deeper, path, found);
    }
    let alias = after
        .strip_prefix("as ")
        .map(|tail| {
            tail.trim_start()
                .bytes()
                .take_while(|b| is_ident(*b))
                .count()
        })
        .map(|length| after[3..].trim_start()[..length].to_owned());
    found.push((path, alias));
    rest
}

pub struct ModuleDeclaration {
    name: String,
    test: bool,
    path_attribute: Option<String>,
    /// The byte range of `{ … }` for an inline module.
    body: Option<std::ops::Range<usize>>,
}

/// Every `mod name;` and `mod name { … }` in `skeleton`, with the attributes before it.
fn module_declarations(code: &str, skeleton: &str) -> Vec<ModuleDeclaration> {
    let bytes = skeleton.as_bytes();
    let mut found = Vec::new();
    for (index, _) in skeleton.match_indices("mod ") {
        if index > 0 && is_ident(bytes[index - 1]) {
            continue;
        }
        let after = skeleton[index + 4..].trim_start();
        let name_length = after.bytes().take_while(|b| is_ident(*b)).count();
        let name = &after[..name_length];
        let start_of_rest = skeleton.len() - after.len() + name_length;
        let rest = skeleton[start_of_rest..].trim_start();
        let body = match rest.as_bytes().first() {
            Some(b';') => None,
            Some(b'{') => {
                let open = skeleton.len() - rest.len();
                Some(open..matching_brace(skeleton, open))
            }
            _ => continue,
        };
        let attributes: Vec<String> = attributes_before(skeleton, index)
            .into_iter()
            .map(|range| code[range].replace(char::is_whitespace, ""))
            .collect();
        let test = attributes
            .iter()
            .any(|attribute| attribute.starts_with("#[cfg(") && has_word(attribute, "test"));
        let path_attribute = attributes.iter().find_map(|attribute| {
            let inner = attribute.strip_prefix("#[path")?;
            let start = inner.find('"')? + 1;
            let end = start + inner[start..].find('"')?;
            Some(inner[start..end].to_owned())
        });
        found.push(ModuleDeclaration {
            name: name.to_owned(),
            test,
            path_attribute,
            body,
        });
    }
    found
}

/// Where the outer attributes written before the item at `index` (after any visibility) are.
fn attributes_before(skeleton: &str, index: usize) -> Vec<std::ops::Range<usize>> {
    let mut before = skeleton[..index].trim_end();
    if before.ends_with(')') {
        if let Some(open) = before.rfind("pub(") {
            before = before[..open].trim_end();
        }
    } else if let Some(shorter) = before.strip_suffix("pub") {
        before = shorter.trim_end();
    }
    let mut attributes = Vec::new();
    while before.ends_with(']') {
        let mut depth = 0;
        let mut start = None;
        for (position, byte) in before.bytes().enumerate().rev() {
            match byte {
                b']' => depth += 1,
                b'[' => {
                    depth -= 1;
                    if depth == 0 {
                        start = Some(position);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(start) = start.filter(|start| *start > 0) else {
            break;
        };
        attributes.push(start - 1..before.len());
        before = before[..start - 1].trim_end();
    }
    attributes
}

/// The index just past the `}` closing the `{` at `open`.
fn matching_brace(skeleton: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (position, byte) in skeleton.bytes().enumerate().skip(open) {
        match byte {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return position + 1;
                }
            }
            _ => {}
        }
    }
    skeleton.len()
}

fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .any(|part| part == word)
}

pub fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}
