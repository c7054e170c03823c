//! A `.gitignore` matcher for `client::pack`: the forms projects actually use — `name`,
//! `dir/`, `*.ext`, `?`, `[a-z]`, `/rooted`, `a/b` (anchored), `!negation`, `**/x`, `x/**`,
//! `a/**/b`, `#` comments and `\` escapes — with git's precedence: the last matching line
//! wins, and a deeper `.gitignore` speaks after the ones above it. Pure (paths in, verdicts
//! out); the walk that reads the files and skips ignored directories is in `pack.rs`.
//!
//! Hand-written rather than the `ignore` crate: it is ~200 lines over a small, well-specified
//! grammar, tested below, and saves the client a regex engine and a parallel directory walker.

/// The rules of one `.gitignore` file.
#[derive(Debug, Clone)]
pub struct IgnoreFile {
    /// The directory holding the file, relative to the packed root ("" for the root itself).
    base: String,
    patterns: Vec<Pattern>,
}

#[derive(Debug, Clone)]
struct Pattern {
    negated: bool,
    dir_only: bool,
    /// Path segments; a `**` segment matches any number of directories.
    segments: Vec<Vec<Token>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Literal(char),
    AnyChar,
    Star,
    /// `**` as a whole segment.
    AnyDirs,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl IgnoreFile {
    /// Parses the text of the `.gitignore` found in directory `base` (relative, `/`-separated).
    pub fn parse(base: &str, text: &str) -> IgnoreFile {
        IgnoreFile {
            base: base.trim_matches('/').to_owned(),
            patterns: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// `Some(true)` when the last matching line ignores `path`, `Some(false)` when it
    /// re-includes it, `None` when no line matches (or `path` is outside this file's directory).
    pub fn verdict(&self, path: &str, is_dir: bool) -> Option<bool> {
        let relative = if self.base.is_empty() {
            path
        } else {
            path.strip_prefix(self.base.as_str())?.strip_prefix('/')?
        };
        let components: Vec<Vec<char>> = relative.split('/').map(|c| c.chars().collect()).collect();
        self.patterns
            .iter()
            .rev()
            .find(|pattern| (is_dir || !pattern.dir_only) && pattern.matches(&components))
            .map(|pattern| !pattern.negated)
    }
}

/// The `.gitignore` files that apply at some point of a walk, outermost first.
#[derive(Debug, Default, Clone)]
pub struct Matcher {
    files: Vec<IgnoreFile>,
}

impl Matcher {
    pub fn push(&mut self, file: IgnoreFile) {
        self.files.push(file);
    }

    /// How many files are stacked (to `truncate` back to when the walk leaves a directory).
    pub fn depth(&self) -> usize {
        self.files.len()
    }

    pub fn truncate(&mut self, depth: usize) {
        self.files.truncate(depth);
    }

    /// Whether `path` (relative to the root, `/`-separated) is ignored.
    pub fn is_ignored(&self, path: &str, is_dir: bool) -> bool {
        self.files
            .iter()
            .rev()
            .find_map(|file| file.verdict(path, is_dir))
            .unwrap_or(false)
    }
}

fn parse_line(line: &str) -> Option<Pattern> {
    let mut line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    // Trailing spaces are dropped unless escaped with a backslash.
    while line.ends_with(' ') && !line.ends_with("\\ ") {
        line = &line[..line.len() - 1];
    }
    let (negated, mut line) = match line.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let dir_only = line.ends_with('/') && !line.ends_with("\\/");
    if dir_only {
        line = line.trim_end_matches('/');
    }
    if line.is_empty() {
        return None;
    }
    // A slash at the start or in the middle anchors the pattern to the file's directory.
    let anchored = line.contains('/');
    let line = line.strip_prefix('/').unwrap_or(line);
    let mut segments: Vec<Vec<Token>> = Vec::new();
    if !anchored {
        segments.push(vec![Token::AnyDirs]);
    }
    for segment in line.split('/').filter(|s| !s.is_empty()) {
        segments.push(match segment {
            "**" => vec![Token::AnyDirs],
            _ => tokenize(segment),
        });
    }
    Some(Pattern {
        negated,
        dir_only,
        segments,
    })
}

fn tokenize(segment: &str) -> Vec<Token> {
    let chars: Vec<char> = segment.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                tokens.push(Token::Literal(chars[i + 1]));
                i += 2;
            }
            '*' => {
                if tokens.last() != Some(&Token::Star) {
                    tokens.push(Token::Star);
                }
                i += 1;
            }
            '?' => {
                tokens.push(Token::AnyChar);
                i += 1;
            }
            '[' => match parse_class(&chars[i + 1..]) {
                Some((token, used)) => {
                    tokens.push(token);
                    i += 1 + used;
                }
                None => {
                    tokens.push(Token::Literal('['));
                    i += 1;
                }
            },
            other => {
                tokens.push(Token::Literal(other));
                i += 1;
            }
        }
    }
    tokens
}

/// Parses a class after its `[`; returns the token and how many characters it used (with `]`).
fn parse_class(chars: &[char]) -> Option<(Token, usize)> {
    let mut i = 0;
    let negated = matches!(chars.first(), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while i < chars.len() {
        let mut c = chars[i];
        if c == ']' && !first {
            return Some((Token::Class { negated, ranges }, i + 1));
        }
        first = false;
        if c == '\\' && i + 1 < chars.len() {
            i += 1;
            c = chars[i];
        }
        if i + 2 < chars.len() && chars[i + 1] == '-' && chars[i + 2] != ']' {
            ranges.push((c, chars[i + 2]));
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
    None
}

impl Pattern {
    fn matches(&self, components: &[Vec<char>]) -> bool {
        match_segments(&self.segments, components)
    }
}

fn match_segments(segments: &[Vec<Token>], components: &[Vec<char>]) -> bool {
    match segments.split_first() {
        None => components.is_empty(),
        Some((first, rest)) if first.as_slice() == [Token::AnyDirs] => {
            // A trailing `/**` matches what is inside, not the directory itself.
            let least = usize::from(rest.is_empty());
            (least..=components.len()).any(|skip| match_segments(rest, &components[skip..]))
        }
        Some((first, rest)) => match components.split_first() {
            Some((component, others)) => {
                match_segment(first, component) && match_segments(rest, others)
            }
            None => false,
        },
    }
}

/// Glob match of one segment, with backtracking over the last `*`.
fn match_segment(tokens: &[Token], text: &[char]) -> bool {
    let (mut t, mut c) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while c < text.len() {
        if t < tokens.len() {
            if tokens[t] == Token::Star {
                star = Some((t + 1, c));
                t += 1;
                continue;
            }
            if single(&tokens[t], text[c]) {
                t += 1;
                c += 1;
                continue;
            }
        }
        match star {
            Some((after_star, from)) => {
                t = after_star;
                c = from + 1;
                star = Some((after_star, from + 1));
            }
            None => return false,
        }
    }
    tokens[t..].iter().all(|token| *token == Token::Star)
}

fn single(token: &Token, c: char) -> bool {
    match token {
        Token::Literal(l) => *l == c,
        Token::AnyChar => true,
        Token::Class { negated, ranges } => {
            ranges.iter().any(|(low, high)| (*low..=*high).contains(&c)) != *negated
        }
        Token::Star | Token::AnyDirs => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignored(rules: &str, path: &str, is_dir: bool) -> bool {
        let mut matcher = Matcher::default();
        matcher.push(IgnoreFile::parse("", rules));
        matcher.is_ignored(path, is_dir)
    }

    #[test]
    fn the_common_forms_match_like_git() {
        // (rules, path, is_dir, ignored)
        let cases: &[(&str, &str, bool, bool)] = &[
            ("secret.txt", "secret.txt", false, true),
            ("secret.txt", "a/b/secret.txt", false, true),
            ("secret.txt", "secret.txt.bak", false, false),
            ("dist/", "dist", true, true),
            ("dist/", "dist", false, false),
            ("dist/", "web/dist", true, true),
            ("*.log", "debug.log", false, true),
            ("*.log", "logs/deep/x.log", false, true),
            ("*.log", "log", false, false),
            ("/rooted", "rooted", false, true),
            ("/rooted", "sub/rooted", false, false),
            ("docs/*.md", "docs/a.md", false, true),
            ("docs/*.md", "x/docs/a.md", false, false),
            ("docs/*.md", "docs/sub/a.md", false, false),
            ("**/cache", "cache", true, true),
            ("**/cache", "a/b/cache", true, true),
            ("a/**/z", "a/z", false, true),
            ("a/**/z", "a/b/c/z", false, true),
            ("a/**/z", "b/a/z", false, false),
            ("build/**", "build", true, false),
            ("build/**", "build/x/y.js", false, true),
            ("file?.txt", "file1.txt", false, true),
            ("file?.txt", "file10.txt", false, false),
            ("[abc].txt", "b.txt", false, true),
            ("[a-c].txt", "d.txt", false, false),
            ("[!a-c].txt", "d.txt", false, true),
            ("*.env\n!example.env", "example.env", false, false),
            ("*.env\n!example.env", "prod.env", false, true),
            ("!keep\n*", "keep", false, true),
            ("# comment\n\n  \nx", "# comment", false, false),
            ("\\#hash", "#hash", false, true),
            ("\\!bang", "!bang", false, true),
            ("trailing   ", "trailing", false, true),
            ("a*b*c", "aXXbYYc", false, true),
            ("a*b*c", "aXXbYY", false, false),
            ("*", "anything/at/all", false, true),
        ];
        for (rules, path, is_dir, expected) in cases {
            assert_eq!(
                ignored(rules, path, *is_dir),
                *expected,
                "rules {rules:?} path {path:?} dir {is_dir}"
            );
        }
    }

    #[test]
    fn a_nested_file_applies_below_its_directory_and_speaks_last() {
        let mut matcher = Matcher::default();
        matcher.push(IgnoreFile::parse("", "*.txt\n"));
        matcher.push(IgnoreFile::parse("web", "!notes.txt\n/local\n"));
        assert!(matcher.is_ignored("notes.txt", false));
        assert!(!matcher.is_ignored("web/notes.txt", false));
        assert!(matcher.is_ignored("web/other.txt", false));
        assert!(matcher.is_ignored("web/local", true));
        assert!(!matcher.is_ignored("web/sub/local", true));
        assert!(!matcher.is_ignored("local", true));
        let depth = matcher.depth();
        matcher.truncate(depth - 1);
        assert!(matcher.is_ignored("web/notes.txt", false));
    }
}
